package report

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/retrace-dev/retrace/replayer/regress"
)

// writeCase writes one JUnit <testcase>: classname is the API, name the
// session (with #k for repeated replays).
func writeCase(w *bufio.Writer, r *regress.Result) error {
	fmt.Fprintf(w, `    <testcase classname="%s" name="%s" time="%.3f">`, attr(r.API), attr(r.Name()), r.Elapsed.Seconds())
	switch r.Status {
	case regress.Failed:
		var b strings.Builder
		for _, f := range r.Findings {
			b.WriteString(f.Where + " " + f.String() + "\n")
			if f.Call != nil {
				b.WriteString("  at " + f.Call.String() + ": " + f.Call.Summary + "\n")
			}
		}
		msg := fmt.Sprintf("%d differences: %s", len(r.Findings), strings.Join(labels(r.Findings, 5), ", "))
		fmt.Fprintf(w, "\n      <failure type=\"diff\" message=\"%s\">", attr(msg))
		xml.EscapeText(w, []byte(b.String()))
		w.WriteString("</failure>\n    ")
	case regress.Errored:
		fmt.Fprintf(w, "\n      <error type=\"error\" message=\"%s\"></error>\n    ", attr(r.Error))
	}
	if len(r.Preexisting) > 0 {
		w.WriteString("\n      <system-out>")
		for _, f := range r.Preexisting {
			xml.EscapeText(w, []byte("also in baseline: "+f.Where+" "+f.String()+"\n"))
		}
		w.WriteString("</system-out>\n    ")
	}
	_, err := w.WriteString("</testcase>\n")
	return err
}

func attr(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// writeJUnit assembles junit.xml from the counts and the streamed cases.
func writeJUnit(path, casesPath string, s *Summary) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	fmt.Fprintf(w, "<testsuites name=\"retrace replay\" tests=\"%d\" failures=\"%d\" errors=\"%d\" time=\"%.3f\">\n",
		s.Sessions, s.Failed, s.Errors, s.Seconds)
	fmt.Fprintf(w, "  <testsuite name=\"retrace replay %s\" tests=\"%d\" failures=\"%d\" errors=\"%d\" time=\"%.3f\" timestamp=\"%s\">\n",
		attr(s.Target), s.Sessions, s.Failed, s.Errors, s.Seconds, s.Started.UTC().Format("2006-01-02T15:04:05"))
	cases, err := os.Open(casesPath)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, cases)
	cases.Close()
	if err != nil {
		return err
	}
	w.WriteString("  </testsuite>\n</testsuites>\n")
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
