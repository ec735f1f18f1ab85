package schemas

// ScanFast is ScanMessage's one-pass reader alone: ok is false where ScanMessage leaves
// the message to DecodeMessage.
func ScanFast(data []byte) (s Scanned, ok bool) {
	if badUTF8(data) >= 0 {
		return Scanned{}, false
	}
	ok = s.scan(data)
	return s, ok
}

// ScannedOf is what ScanMessage returns for a message DecodeMessage read.
var ScannedOf = scannedOf
