package leaseobject

import (
	"encoding/json"
	"slices"
	"strings"
)

// Object.Finalizers is the list's JSON text; the decision core asks of it
// only whether a write changes it, but for one name (I11: the
// MultiClusterLease controller adds and removes its own finalizer).

// SameFinalizersBut reports whether two finalizer lists, as JSON text, hold
// the same finalizers in the same order once every name is left out of
// both. A list the API server wrote (compact, names without escapes) is
// walked in place, so the controller's admitted write does not allocate;
// anything else is decoded, and what is no list of strings differs.
func SameFinalizersBut(a, b, name string) bool {
	if a == b {
		return true
	}
	x, okA := finalizerItems(a)
	y, okB := finalizerItems(b)
	if !okA || !okB {
		return decodedFinalizersBut(a, b, name)
	}
	for {
		var ex, ey string
		ex, x = nextFinalizerBut(x, name)
		ey, y = nextFinalizerBut(y, name)
		if ex != ey {
			return false
		}
		if ex == "" && x == "" && y == "" {
			return true
		}
	}
}

// finalizerItems is the inside of a compact list of plain strings,
// `"a","b"` for `["a","b"]` ("" for none), or false when the text is
// anything else (escapes, other values, spaces).
func finalizerItems(s string) (string, bool) {
	if s == "" {
		return "", true
	}
	if len(s) < 4 || !strings.HasPrefix(s, `["`) || !strings.HasSuffix(s, `"]`) || strings.ContainsAny(s, "\\ \t\r\n") {
		return "", false
	}
	inner := s[1 : len(s)-1]
	// Without escapes a name holds no quote: the items are exactly what
	// lies between the quotes, separated by single commas.
	for rest := inner; ; {
		if len(rest) < 2 || rest[0] != '"' {
			return "", false
		}
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 || end == 0 {
			return "", false
		}
		rest = rest[end+2:]
		if rest == "" {
			return inner, true
		}
		if rest[0] != ',' {
			return "", false
		}
		rest = rest[1:]
	}
}

// nextFinalizerBut returns the next item of finalizerItems' text that is
// not name ("" at the end) and the text after it.
func nextFinalizerBut(items, name string) (string, string) {
	for items != "" {
		end := strings.IndexByte(items[1:], '"') + 1
		item := items[1:end]
		items = strings.TrimPrefix(items[end+1:], ",")
		if item != name {
			return item, items
		}
	}
	return "", ""
}

// decodedFinalizersBut is SameFinalizersBut for texts that are not plain
// compact lists.
func decodedFinalizersBut(a, b, name string) bool {
	list := func(s string) ([]string, bool) {
		if s == "" {
			return nil, true
		}
		var out []string
		if json.Unmarshal([]byte(s), &out) != nil {
			return nil, false
		}
		kept := out[:0]
		for _, f := range out {
			if f != name {
				kept = append(kept, f)
			}
		}
		return kept, true
	}
	x, okA := list(a)
	y, okB := list(b)
	return okA && okB && slices.Equal(x, y)
}
