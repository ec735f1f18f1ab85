// Package bpe counts tokens exactly with OpenAI's byte-pair encodings, offline.
//
// [New] returns a [Counter] for "cl100k_base" (GPT-4, GPT-3.5) or "o200k_base" (GPT-4o,
// GPT-4.1, GPT-5, o-series). The vocabularies are compiled into the binary by
// github.com/tiktoken-go/tokenizer: nothing is fetched or read from disk at run time.
// A Counter implements tokens.Counter and is safe for concurrent use, so build one at
// start-up and share it.
//
// Counts are of ordinary text: special-token strings such as "<|endoftext|>" are
// counted as the plain text they are, the way tiktoken's encode_ordinary does.
package bpe
