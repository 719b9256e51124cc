package extender

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"

	"github.com/segmentio/encoding/json"
)

// The extender's one codec for the JSON of k8s.io/kube-scheduler/extender/v1 (what
// kube-scheduler's HTTPExtender sends and reads with encoding/json). It is
// github.com/segmentio/encoding/json, a drop-in for encoding/json (same field matching, same
// Marshaler/Unmarshaler calls, same output bytes with EscapeHTML|SortMapKeys) that decodes a
// filter call of 5,000 node names in about a fifth of the time and without reflection on every
// value: at 5,000 nodes the codec was most of a prioritize round trip (docs/bench/report.md).

// bufPool holds request buffers and replyPool reply buffers, so a call does not grow fresh ones
// (a filter call of 5,000 node names is about 100 KiB in and out).
var (
	bufPool   = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	replyPool = sync.Pool{New: func() any { return new([]byte) }}
)

// decode reads the request body into v. It answers 400 and reports false when the body cannot
// be read (or exceeds maxBody) or is not JSON of v's type; the message names v's type and the
// decoder's reason, e.g. `malformed *v1.ExtenderArgs: json: cannot unmarshal string into Go
// struct field ExtenderArgs.NodeNames of type []string`.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufPool.Put(buf)
	if _, err := buf.ReadFrom(r.Body); err != nil {
		http.Error(w, "reading request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	// The decoder recurses once per nesting level without a limit, and a runtime stack overflow
	// is fatal (no recover): refuse deep bodies first, as encoding/json does past 10,000 levels.
	if err := checkDepth(buf.Bytes(), maxDepth); err != nil {
		http.Error(w, fmt.Sprintf("malformed %T: %v", v, err), http.StatusBadRequest)
		return false
	}
	// Strings are copied out of buf (no DontCopyString): the pod and node names outlive the call
	// in the cache, and buf goes back to the pool.
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		http.Error(w, fmt.Sprintf("malformed %T: %v", v, err), http.StatusBadRequest)
		return false
	}
	return true
}

// reply writes v as JSON, byte for byte what encoding/json.Marshal writes, with Content-Type
// application/json; an encoding failure is answered 500 with its reason.
func reply(w http.ResponseWriter, v any) {
	buf := replyPool.Get().(*[]byte)
	defer replyPool.Put(buf)
	var err error
	if *buf, err = json.Append((*buf)[:0], v, json.EscapeHTML|json.SortMapKeys); err != nil {
		http.Error(w, "encoding reply: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(*buf)
}

// maxDepth is the deepest nesting of arrays and objects a request may have: encoding/json's own
// limit (its scanner's maxNestingDepth). A pod nests about 10 levels.
const maxDepth = 10000

// checkDepth reports an error naming the byte offset where JSON text b nests arrays and objects
// deeper than limit. It only counts brackets outside strings (escapes honoured), in one pass
// without recursion; whether b is valid JSON is left to the decoder.
func checkDepth(b []byte, limit int) error {
	depth, inString, escaped := 0, false, false
	for i, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > limit {
				return fmt.Errorf("nesting deeper than %d levels at byte %d", limit, i)
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}
