package cliflags

import (
	"fmt"
	"strconv"
	"strings"
)

// JoinXIDs writes XIDs as "13,31,…", the --application-xids syntax.
func JoinXIDs(x []uint64) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(s, ",")
}

// ParseXIDs reads "13,31,…"; an empty value means no application XIDs. Errors name
// --application-xids and the bad entry.
func ParseXIDs(s string) ([]uint64, error) {
	out := []uint64{}
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--application-xids: %q is not an XID number", f)
		}
		out = append(out, v)
	}
	return out, nil
}
