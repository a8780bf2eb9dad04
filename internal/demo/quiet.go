package demo

import "github.com/sirupsen/logrus"

// QuietDependencies lowers go-mysql-server's logging (logrus, global: a line
// per connection at info level) to errors for the demo's narration, and
// returns the undo.
func QuietDependencies() (restore func()) {
	prev := logrus.GetLevel()
	logrus.SetLevel(logrus.ErrorLevel)
	return func() { logrus.SetLevel(prev) }
}
