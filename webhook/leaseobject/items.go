package leaseobject

// MaxObjectItems is the most JSON items (values and object keys) one lease
// object may hold for leaseguard to read it: parsed, each costs about 400
// bytes, and an AdmissionReview carries the object twice (object and
// oldObject) with a few hundred items of its own, which the admission
// reader's limit (100,000) must hold. A lease holds a few hundred.
const MaxObjectItems = 49_000

// CountItems counts the JSON items of a valid JSON body: every array and
// object, every value in them and every key. That is the root plus one per
// '[', '{', ',' and ':' outside strings (an empty array or object counts
// one too many, which its parse tree costs anyway). Linear, no allocation.
func CountItems(body []byte) int {
	n, inString := 1, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inString {
			switch c {
			case '\\':
				i++ // the escaped byte; \uXXXX's digits need no care
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{', ',', ':':
			n++
		}
	}
	return n
}
