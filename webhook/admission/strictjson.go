package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/valyala/fastjson"
)

// smallObject is the number of keys up to which duplicates are looked for
// pair by pair; larger objects use a set, so that an object with a million
// keys costs a million steps, not a million squared.
const smallObject = 16

// noDuplicateKeys fails when any object in v has a key twice. fastjson reads
// the first of duplicate keys, the API machinery's decoder the last: a review
// with a duplicate key could be read by leaseguard as another request than
// the one the API machinery would see. The API server never sends one (it
// encodes the review from its own structures), so such a body is refused,
// naming where the duplicate is.
func noDuplicateKeys(v *fastjson.Value) error {
	var c keyChecker
	if steps, key, ok := c.find(v); ok {
		slices.Reverse(steps)
		return fmt.Errorf("key %q appears more than once in %s", clipText(key, 64), clipText(orRoot(strings.Join(steps, "")), maxErrorText))
	}
	return nil
}

// clipText cuts s to n bytes, on a character boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

func orRoot(path string) string {
	switch {
	case path == "":
		return "the body"
	case path[0] == '.':
		return path[1:]
	}
	return path
}

// keyChecker keeps the keys of the objects being walked on one stack, so
// that a walk allocates next to nothing for the small objects a review is
// made of.
type keyChecker struct {
	keys [][]byte
}

// find returns the first duplicate key in v and the path of the object
// holding it, as steps from the innermost out (joined once, by the caller:
// joining at every level would cost the square of the depth).
func (c *keyChecker) find(v *fastjson.Value) (steps []string, key string, found bool) {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		base := len(c.keys)
		var seen map[string]struct{}
		if o.Len() > smallObject {
			seen = make(map[string]struct{}, o.Len())
		}
		o.Visit(func(k []byte, child *fastjson.Value) {
			if found {
				return
			}
			if c.seen(k, base, seen) {
				key, found = string(k), true
				return
			}
			if inner, dk, ok := c.find(child); ok {
				steps, key, found = append(inner, jsonField(clipText(string(k), 64))), dk, true
			}
		})
		c.keys = c.keys[:base]
	case fastjson.TypeArray:
		items, _ := v.Array()
		for i, item := range items {
			if inner, k, ok := c.find(item); ok {
				return append(inner, "["+strconv.Itoa(i)+"]"), k, true
			}
		}
	}
	return steps, key, found
}

// seen reports whether the object whose keys start at base already has k,
// and records k.
func (c *keyChecker) seen(k []byte, base int, set map[string]struct{}) bool {
	if set != nil {
		if _, ok := set[string(k)]; ok {
			return true
		}
		set[string(k)] = struct{}{}
		return false
	}
	for _, have := range c.keys[base:] {
		if bytes.Equal(have, k) {
			return true
		}
	}
	c.keys = append(c.keys, k)
	return false
}

// jsonField writes a key as a path step: .name, or ["odd key"] where the key
// is not a plain name.
func jsonField(key string) string {
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return "[" + strconv.Quote(key) + "]"
		}
	}
	if key == "" {
		return `[""]`
	}
	return "." + key
}

// noSurrogateEscapes fails on a \u escape of a UTF-16 surrogate (D800 to
// DFFF). fastjson reads a lone one as the six characters written, and a
// pair with another escape otherwise than encoding/json, which reads each
// lone surrogate as U+FFFD: "manager-b\ud800" would be one name to
// leaseguard and another to the API machinery. encoding/json writes no
// surrogate escape (it writes such characters as UTF-8). body is valid
// JSON, so a backslash is always inside a string and starts an escape.
func noSurrogateEscapes(body []byte) error {
	for i := 0; ; {
		j := bytes.IndexByte(body[i:], '\\')
		if j < 0 {
			return nil
		}
		i += j
		if i+1 < len(body) && body[i+1] == 'u' && i+6 <= len(body) {
			if r, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16); err == nil && r >= 0xD800 && r <= 0xDFFF {
				return fmt.Errorf("not JSON the API server writes: escaped UTF-16 surrogate %s", body[i:i+6])
			}
			i += 6
			continue
		}
		i += 2
	}
}

// maxErrorText bounds the text of a reader's error that goes into an
// answer and a log line.
const maxErrorText = 512

// readerError shortens a fastjson error to what is wrong and where: its
// text nests one "cannot parse <what>: " per level of the body (300 at
// most), which says nothing, before the reason and the unparsed tail.
func readerError(err error) error {
	msg, tail := err.Error(), ""
	if i := strings.Index(msg, "; unparsed tail: "); i >= 0 {
		msg, tail = msg[:i], msg[i:]
	}
	if i := strings.LastIndex(msg, "cannot parse "); i >= 0 {
		msg = msg[i:]
	}
	msg += tail
	if len(msg) > maxErrorText {
		msg = strings.ToValidUTF8(msg[:maxErrorText], "") + "..."
	}
	return errors.New(msg)
}

// notJSON says where body stops being JSON, as encoding/json's scanner
// finds it (linear, with a short message).
func notJSON(body []byte) error {
	var raw json.RawMessage
	err := json.Unmarshal(body, &raw)
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Errorf("not JSON: %s (at byte %d)", syntax.Error(), syntax.Offset)
	}
	if err != nil {
		return fmt.Errorf("not JSON: %w", readerError(err))
	}
	return errors.New("not JSON")
}
