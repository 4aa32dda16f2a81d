package devexamples

import (
	"os"
	"strings"
	"testing"
)

// The README's "Try it" shows the very commands `leaseguard dev` prints and
// the integration test runs (test/integration, TestDevExamplesDoWhatTheySay).
func TestReadmeShowsEveryExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range Examples() {
		if cmd := e.Command("$kubectl"); !strings.Contains(string(readme), cmd) {
			t.Errorf("README.md does not show the example %q:\n%s", e.Comment, cmd)
		}
		if !strings.Contains(string(readme), "# "+e.Comment) {
			t.Errorf("README.md does not say what the example does: # %s", e.Comment)
		}
	}
}
