package policy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docs/design.md maps each invariant to its Go function, its
// match-condition CEL, its admission-policy CEL and the tests that keep
// them equal ("The three encodings of each invariant"). A map that names a
// renamed or deleted function sends whoever changes an invariant to the
// wrong place: every test it names must exist, every method it names on
// the decision core's, the renderers' and the VAP compiler's types, and
// every function it names in celexpr, policy and manifests.
func TestEncodingsMapNamesWhatExists(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "### The three encodings of each invariant")
	if start < 0 {
		t.Fatal("docs/design.md has no section \"The three encodings of each invariant\"")
	}
	section := text[start:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	for i := 1; i <= 11; i++ {
		if !regexp.MustCompile(`(?m)^\| \*\*I` + strconv.Itoa(i) + ` `).MatchString(section) {
			t.Errorf("the map has no row for I%d", i)
		}
	}

	// What the repository declares: functions, methods by receiver type,
	// and package-level names by package directory.
	funcs := map[string]bool{}
	methods := map[string]bool{}  // "recv.name"
	pkgNames := map[string]bool{} // "dir.name", dir the package's directory name
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Base(filepath.Dir(path))
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					funcs[d.Name.Name] = true
					pkgNames[dir+"."+d.Name.Name] = true
					continue
				}
				recv := d.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if idx, ok := recv.(*ast.IndexExpr); ok {
					recv = idx.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					methods[id.Name+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							pkgNames[dir+"."+n.Name] = true
						}
					case *ast.TypeSpec:
						pkgNames[dir+"."+s.Name.Name] = true
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	named := 0
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(section, -1) {
		name := m[1]
		if strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".x") {
			continue // a file, or the notation's placeholder
		}
		switch {
		case regexp.MustCompile(`^Test[A-Z]\w*$`).MatchString(name):
			named++
			if !funcs[name] {
				t.Errorf("the map names test %s, which does not exist", name)
			}
		case regexp.MustCompile(`^(check|vapCEL|generator|Rule|Bind|Template|Globs)\.\w+$`).MatchString(name):
			named++
			if !methods[name] {
				t.Errorf("the map names method %s, which does not exist", name)
			}
		case regexp.MustCompile(`^(celexpr|policy|manifests|pattern)\.[A-Z]\w*$`).MatchString(name):
			named++
			if !pkgNames[name] {
				t.Errorf("the map names %s, which does not exist", name)
			}
		}
	}
	if named < 60 {
		t.Errorf("the map names %d tests, methods and functions this test checks: the patterns no longer match how it names them", named)
	}
}
