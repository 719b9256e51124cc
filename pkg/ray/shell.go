package ray

import (
	"fmt"
	"strings"
)

// word is one shell word of a command line: its byte span [start, end) in the line and its
// value after quote removal. op marks a control operator (";", "&&", "||", "|", "&", "(", ")",
// newline), which ends a simple command.
type word struct {
	start, end int
	value      string
	op         bool
}

// splitWords scans a POSIX shell command line (the subset KubeRay and users write in a Ray
// container's args: blanks, single and double quotes, backslash escapes, control operators)
// into words. Parameter expansions such as ${X:-0} are kept literally in the value. An
// unterminated quote is an error.
func splitWords(line string) ([]word, error) {
	var out []word
	i := 0
	for i < len(line) {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			i++
			continue
		case c == '#':
			// A comment runs to the end of the line.
			for i < len(line) && line[i] != '\n' {
				i++
			}
			continue
		case c == '\n' || c == ';' || c == '(' || c == ')':
			out = append(out, word{start: i, end: i + 1, value: string(c), op: true})
			i++
			continue
		case c == '&' || c == '|':
			n := 1
			if i+1 < len(line) && line[i+1] == c {
				n = 2
			}
			out = append(out, word{start: i, end: i + n, value: line[i : i+n], op: true})
			i += n
			continue
		}
		start := i
		var b strings.Builder
	scan:
		for i < len(line) {
			c := line[i]
			switch c {
			case ' ', '\t', '\n', ';', '&', '|', '(', ')':
				break scan
			case '\\':
				if i+1 < len(line) {
					if line[i+1] != '\n' {
						b.WriteByte(line[i+1])
					}
					i += 2
				} else {
					i++
				}
			case '\'':
				j := strings.IndexByte(line[i+1:], '\'')
				if j < 0 {
					return nil, fmt.Errorf("unterminated single quote at byte %d of %q", i, line)
				}
				b.WriteString(line[i+1 : i+1+j])
				i += j + 2
			case '"':
				i++
				closed := false
				for i < len(line) {
					if line[i] == '"' {
						closed = true
						i++
						break
					}
					if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`\n", line[i+1]) >= 0 {
						if line[i+1] != '\n' {
							b.WriteByte(line[i+1])
						}
						i += 2
						continue
					}
					b.WriteByte(line[i])
					i++
				}
				if !closed {
					return nil, fmt.Errorf("unterminated double quote at byte %d of %q", start, line)
				}
			default:
				b.WriteByte(c)
				i++
			}
		}
		out = append(out, word{start: start, end: i, value: b.String()})
	}
	return out, nil
}

// shellQuote returns s as one shell word: unchanged when it holds only safe characters,
// otherwise in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:@+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
