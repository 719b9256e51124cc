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
		w, err := scanWord(line, i)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
		i = w.end
	}
	return out, nil
}

// scanWord scans the word that starts at byte start of line (not a blank, comment or control
// operator) up to the next unquoted blank or operator, removing quotes and backslash escapes
// from its value. An unterminated quote is an error.
func scanWord(line string, start int) (word, error) {
	i := start
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
				return word{}, fmt.Errorf("unterminated single quote at byte %d of %q", i, line)
			}
			b.WriteString(line[i+1 : i+1+j])
			i += j + 2
		case '"':
			var closed bool
			if i, closed = scanDoubleQuoted(line, i+1, &b); !closed {
				return word{}, fmt.Errorf("unterminated double quote at byte %d of %q", start, line)
			}
		default:
			b.WriteByte(c)
			i++
		}
	}
	return word{start: start, end: i, value: b.String()}, nil
}

// scanDoubleQuoted scans the inside of a double-quoted string from byte i of line (just past
// the opening quote), writing its value to b, and returns the byte just past the closing quote;
// closed is false when the line ends first.
func scanDoubleQuoted(line string, i int, b *strings.Builder) (next int, closed bool) {
	for i < len(line) {
		if line[i] == '"' {
			return i + 1, true
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
	return i, false
}

// shellQuote returns s as one shell word: unchanged when it holds only safe characters,
// otherwise in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:@+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
