package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseguard/leaseguard/internal/controlplane"
)

// example is one kubectl command a document shows, with the verdict its
// comment promises.
type example struct {
	verdict string // "denied", "admitted", "admitted with a warning"
	args    []string
}

// verdictOf reads a comment such as "# Denied: ..." or "# admitted with a
// warning (...)"; "" for any other comment.
func verdictOf(comment string) string {
	c := strings.ToLower(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(comment), "#")))
	for _, v := range []string{"admitted with a warning", "admitted", "denied"} {
		if strings.HasPrefix(c, v) {
			return v
		}
	}
	return ""
}

// kubectlExamples finds the kubectl commands of a shell snippet, each under
// a comment saying its verdict; commandName is how the snippet spells
// kubectl ("kubectl" or "$kubectl"). Continuation lines are joined and
// single quotes honoured, as a shell would.
func kubectlExamples(t *testing.T, snippet, commandName string) []example {
	t.Helper()
	var out []example
	verdict := ""
	lines := strings.Split(snippet, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, "#") {
			if v := verdictOf(line); v != "" {
				verdict = v
			}
			continue
		}
		if !strings.HasPrefix(line, commandName+" ") {
			continue
		}
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		if verdict == "" {
			t.Fatalf("command without a verdict comment above it: %s", line)
		}
		out = append(out, example{verdict: verdict, args: shellWords(t, strings.TrimPrefix(line, commandName+" "))})
		verdict = ""
	}
	return out
}

// shellWords splits a command line on blanks, keeping single-quoted text
// whole.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// runExamples runs each example from the repository root with the control
// plane's kubectl against kubeconfig, and checks the verdict it promised.
func runExamples(t *testing.T, source string, examples []example, kubeconfig string) {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples {
		cmd := exec.Command(cp.KubectlPath, ex.args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, err := cmd.CombinedOutput()
		text := string(out)
		ok := false
		switch ex.verdict {
		case "denied":
			ok = err != nil && strings.Contains(text, "denied the request: leaseguard: ")
		case "admitted with a warning":
			ok = err == nil && strings.Contains(text, "Warning: leaseguard: ") && strings.Contains(text, "(server dry run)")
		case "admitted":
			ok = err == nil && !strings.Contains(text, "Warning:") && strings.Contains(text, "(server dry run)")
		}
		if !ok {
			t.Errorf("%s: the example promised %q, but kubectl %s (error %v) printed:\n%s", source, ex.verdict, strings.Join(ex.args, " "), err, text)
		}
	}
}

// readmeTryIt returns the README's "Try it" shell snippet.
func readmeTryIt(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "\n## Try it")
	if i < 0 {
		t.Fatal(`README.md has no "## Try it" section`)
	}
	text = text[i:]
	start := strings.Index(text, "```sh\n")
	if start < 0 {
		t.Fatal(`README.md's "Try it" has no sh block`)
	}
	text = text[start+len("```sh\n"):]
	return text[:strings.Index(text, "```")]
}

func TestKubectlExamplesAreParsedAsAShellWould(t *testing.T) {
	got := kubectlExamples(t, `# Denied: not a manager.
$kubectl --as someone \
  patch x y -p '{"spec":{"a": 1}}' --dry-run=server
# Error from server (Forbidden): ...
# Admitted with a warning (warn mode).
$kubectl apply -f f.yaml
curl -s 127.0.0.1:8080/metrics
`, "$kubectl")
	if len(got) != 2 || got[0].verdict != "denied" || got[1].verdict != "admitted with a warning" {
		t.Fatalf("examples: %+v", got)
	}
	want := []string{"--as", "someone", "patch", "x", "y", "-p", `{"spec":{"a": 1}}`, "--dry-run=server"}
	if strings.Join(got[0].args, "|") != strings.Join(want, "|") {
		t.Fatalf("args %q, want %q", got[0].args, want)
	}
}
