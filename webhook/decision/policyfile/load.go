// Package policyfile reads the LeasePolicy file: strict decoding with line
// numbers, validation of the whole file through the policy package, and
// reloading while the server runs.
package policyfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/leaseguard/leaseguard/api/v1alpha1"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// MaxFileSize bounds the policy file; a larger one is surely not a policy.
const MaxFileSize = 1 << 20

// Load reads and compiles the policy file at path.
func Load(path string, opts policy.CompileOptions) (*policy.Policy, []byte, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	p, err := Parse(data, opts)
	if err != nil {
		return nil, data, fmt.Errorf("policy file %s: %w", path, err)
	}
	return p, data, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("policy file %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("policy file %s: larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
}

// Parse decodes a policy strictly (an unknown or misspelt field is an error
// with its line) and validates it as a whole, listing every problem at once.
func Parse(data []byte, opts policy.CompileOptions) (*policy.Policy, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("empty file: want apiVersion %s, kind %s", v1alpha1.APIVersion, v1alpha1.Kind)
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("empty file (only comments): want apiVersion %s, kind %s", v1alpha1.APIVersion, v1alpha1.Kind)
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, fmt.Errorf("line %d: a policy file holds one document; found another", extra.Line)
	case !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("after the first document: %w", yamlError(err))
	}

	var spec v1alpha1.LeasePolicy
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(&spec); err != nil {
		return nil, yamlError(err)
	}
	p, errs := policy.Compile(&spec, opts)
	if len(errs) > 0 {
		lines := make([]string, 0, len(errs))
		for _, e := range errs {
			msg := e.Error()
			if line := lineOf(&root, e.Field); line > 0 {
				msg = "line " + strconv.Itoa(line) + ": " + msg
			}
			lines = append(lines, msg)
		}
		return nil, fmt.Errorf("%d problem(s):\n  %s", len(lines), strings.Join(lines, "\n  "))
	}
	return p, nil
}

func yamlError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%d problem(s):\n  %s", len(te.Errors), strings.Join(te.Errors, "\n  "))
	}
	return err
}

// lineOf finds the line of a field path such as "rules[1].bind" in the YAML
// tree, or of its nearest ancestor that exists; 0 when unknown.
func lineOf(root *yaml.Node, path string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, part := range strings.Split(path, ".") {
		name, index := part, -1
		if i := strings.IndexByte(part, '['); i >= 0 && strings.HasSuffix(part, "]") {
			name = part[:i]
			index, _ = strconv.Atoi(part[i+1 : len(part)-1])
		}
		next := mappingValue(n, name)
		if next == nil {
			return line
		}
		n, line = next, next.Line
		if index >= 0 {
			if n.Kind != yaml.SequenceNode || index >= len(n.Content) {
				return line
			}
			n = n.Content[index]
			line = n.Line
		}
	}
	return line
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
