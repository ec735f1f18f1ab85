package formats

import "bytes"

// renderOpenAI writes {"messages": [...]}: each message as Message.Encode writes it.
func renderOpenAI(b *bytes.Buffer, in input) (int, error) {
	off := 0
	b.WriteString(`{"messages":[`)
	for i := range in.msgs {
		if i > 0 {
			b.WriteByte(',')
		}
		enc, err := in.msgs[i].Encode()
		if err != nil {
			return 0, err
		}
		b.Write(enc)
		if i == in.summary {
			off = b.Len()
		}
	}
	b.WriteString(`]}`)
	return off, nil
}
