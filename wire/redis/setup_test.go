package redis_test

import (
	"testing"

	"github.com/retrace-dev/retrace/wire/redis"
	"github.com/stretchr/testify/assert"
)

func TestIsSetupRedis(t *testing.T) {
	tests := []struct {
		req  string
		want bool
	}{
		{"*2\r\n$5\r\nhello\r\n$1\r\n3\r\n", true},
		{"*4\r\n$6\r\nclient\r\n$7\r\nsetinfo\r\n$8\r\nLIB-NAME\r\n$2\r\nx1\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n", true},
		{"*2\r\n$6\r\nselect\r\n$1\r\n2\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", false},
		{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", false},
		{"*1\r\n$4\r\nPI", false},
		{"PING\r\n", true}, {"GET k\r\n", false},
		{"", false},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, redis.IsSetupBurst([]byte(tc.req)), "%q", tc.req)
	}
	get := []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
	assert.Zero(t, testing.AllocsPerRun(100, func() { redis.IsSetupBurst(get) }))
}
