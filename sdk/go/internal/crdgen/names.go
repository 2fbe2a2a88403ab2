package crdgen

import (
	"strconv"
	"strings"
	"unicode"
)

// commonInitialisms are the words Go spells in upper case inside identifiers (the golint list,
// plus GPU). A lower-case plural of one of them keeps its "s": "gpus" becomes "GPUs".
var commonInitialisms = map[string]bool{
	"ACL": true, "API": true, "ASCII": true, "CPU": true, "CSS": true, "DNS": true, "EOF": true,
	"GID": true, "GPU": true, "GUID": true, "HTML": true, "HTTP": true, "HTTPS": true, "ID": true,
	"IP": true, "JSON": true, "LHS": true, "QPS": true, "RAM": true, "RHS": true, "RPC": true,
	"SLA": true, "SMTP": true, "SQL": true, "SSH": true, "TCP": true, "TLS": true, "TTL": true,
	"UDP": true, "UI": true, "UID": true, "UUID": true, "URI": true, "URL": true, "UTF8": true,
	"VM": true, "XML": true, "XMPP": true, "XSRF": true, "XSS": true,
}

// goName turns a JSON property name or an enum value into an exported Go identifier part:
// "gpuType" -> "GPUType", "batch-inference" -> "BatchInference", "costUSD" -> "CostUSD",
// "memoryMiB" -> "MemoryMiB". Characters that cannot appear in an identifier separate words.
// The result is empty only for an input without letters or digits.
func goName(s string) string {
	var b strings.Builder
	for _, word := range splitWords(s) {
		upper := strings.ToUpper(word)
		switch {
		case commonInitialisms[upper]:
			b.WriteString(upper)
		case len(word) > 1 && word[len(word)-1] == 's' && commonInitialisms[upper[:len(upper)-1]]:
			b.WriteString(upper[:len(upper)-1] + "s")
		default:
			r := []rune(word)
			r[0] = unicode.ToUpper(r[0])
			b.WriteString(string(r))
		}
	}
	return b.String()
}

// splitWords splits s at characters that are neither letters nor digits and at camel-case
// boundaries: a lower-case letter or digit followed by an upper-case letter, and the last
// letter of an upper-case run that a lower-case letter follows ("HTTPServer" -> HTTP, Server).
func splitWords(s string) []string {
	var words []string
	for _, chunk := range strings.FieldsFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		runes := []rune(chunk)
		start := 0
		for i := 1; i < len(runes); i++ {
			prev, cur := runes[i-1], runes[i]
			nextIsLower := i+1 < len(runes) && unicode.IsLower(runes[i+1])
			lowerToUpper := (unicode.IsLower(prev) || unicode.IsDigit(prev)) && unicode.IsUpper(cur)
			endOfUpperRun := unicode.IsUpper(prev) && unicode.IsUpper(cur) && nextIsLower
			if lowerToUpper || endOfUpperRun {
				words = append(words, string(runes[start:i]))
				start = i
			}
		}
		words = append(words, string(runes[start:]))
	}
	return words
}

// nameSet hands out identifiers that are unique within one scope (the package, or the fields
// of one struct). A taken name gets the smallest numeric suffix from 2 on that is free, so the
// outcome depends only on the order of requests, which the generator keeps fixed.
type nameSet struct {
	taken map[string]bool
}

func newNameSet() *nameSet { return &nameSet{taken: map[string]bool{}} }

// free returns want if it is not taken, or want followed by the smallest free suffix; it
// reserves nothing.
func (n *nameSet) free(want string) string {
	if !n.taken[want] {
		return want
	}
	for i := 2; ; i++ {
		candidate := want + strconv.Itoa(i)
		if !n.taken[candidate] {
			return candidate
		}
	}
}

// reserve marks name as taken.
func (n *nameSet) reserve(name string) { n.taken[name] = true }

// claim returns free(want) and reserves it.
func (n *nameSet) claim(want string) string {
	name := n.free(want)
	n.reserve(name)
	return name
}
