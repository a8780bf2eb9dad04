package mysql_test

import (
	"testing"

	"github.com/retrace-dev/retrace/wire/mysql"
)

func TestCollapseSQL(t *testing.T) {
	for in, want := range map[string]string{
		"  SELECT 1 ;":                  "SELECT 1",
		"SELECT\t*\nFROM `a  b`":        "SELECT * FROM `a  b`",
		`SELECT 'it\'s  x'   , "a  b"`:  `SELECT 'it\'s  x' , "a  b"`,
		"INSERT INTO t VALUES (1,\n2);": "INSERT INTO t VALUES (1, 2)",
	} {
		if got := mysql.CollapseSQL(in); got != want {
			t.Errorf("mysql.CollapseSQL(%q) = %q, want %q", in, got, want)
		}
	}
}
