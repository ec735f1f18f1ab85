package tokens

import "github.com/compactor/compactor/schemas"

// Scanned returns Message(m) for the message m that s was scanned from
// (schemas.ScanMessage): the chars/4 count, from the sizes the scan read, without
// decoding the message.
func Scanned(s *schemas.Scanned) int {
	if s.Tokens > 0 {
		if s.Tokens >= scannedFloorBound(s) {
			return s.Tokens
		}
		return max(s.Tokens, scannedFloor(s))
	}
	return scannedEstimate(s)
}

// chars4 is Text of a text of the given size.
func chars4(t schemas.TextSize) int { return (t.Runes + 3) / 4 }

// scannedCallBytes is callBytes of the scanned message.
func scannedCallBytes(s *schemas.Scanned) int {
	b := s.Name.Bytes
	for _, c := range s.ToolCalls {
		b += c.Name.Bytes + c.Arguments.Bytes
	}
	return b
}

// scannedFloorBound is floorBound of the scanned message.
func scannedFloorBound(s *schemas.Scanned) int {
	b := scannedCallBytes(s)
	if s.ContentRef != nil {
		return bytesFloor(b) + refFloor(s.ContentRef)
	}
	return bytesFloor(b + s.Reasoning.Bytes + s.ContentBytes)
}

// scannedFloor is Floor of the scanned message.
func scannedFloor(s *schemas.Scanned) int {
	b := scannedCallBytes(s)
	if s.ContentRef != nil {
		return bytesFloor(b) + refFloor(s.ContentRef)
	}
	b += s.Reasoning.Bytes + s.ContentText.Bytes
	for _, p := range s.Parts {
		b += partBytes(p.Type, p.Text.Bytes, p.Fields, p.Raw)
	}
	return bytesFloor(b)
}

// scannedEstimate is Estimate of the scanned message.
func scannedEstimate(s *schemas.Scanned) int {
	n := PerMessage + chars4(s.Name)
	if s.ContentRef != nil {
		n += max(s.ContentRef.Tokens, refFloor(s.ContentRef))
	} else {
		n += chars4(s.Reasoning) + chars4(s.ContentText)
		for _, p := range s.Parts {
			if p.Type == "text" {
				n += chars4(p.Text)
			}
			n += partEstimate(p.Type, p.Fields, p.Raw)
		}
	}
	for _, c := range s.ToolCalls {
		n += PerToolCall + chars4(c.Name) + chars4(c.Arguments)
	}
	return n
}
