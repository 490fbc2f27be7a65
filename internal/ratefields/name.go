package ratefields

// BadByte returns the index of the first byte of name outside printable
// ASCII (0x20 to 0x7e), which a structured-field string cannot hold, or -1
// when there is none. An empty name has none, though it is no policy name:
// see ValidName.
func BadByte(name string) int {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return i
		}
	}
	return -1
}

// ValidName reports whether name can be sent as a policy's name: a
// non-empty string of printable ASCII.
func ValidName(name string) bool {
	return name != "" && BadByte(name) < 0
}

// Quote returns name as a structured-field string (RFC 9651 §4.1.6): in
// double quotes, with '"' and '\' escaped by a backslash. name must have
// passed ValidName.
func Quote(name string) string {
	b := make([]byte, 0, len(name)+2)
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, name[i])
	}
	return string(append(b, '"'))
}
