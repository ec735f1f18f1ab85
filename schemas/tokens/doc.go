// Package tokens estimates how many tokens messages take in a model's context.
//
// The estimate every Compactor client shares is a quarter of the number of characters
// (Unicode code points) of the text, rounded up, plus a fixed cost per message, per tool
// call and per non-text content part. A message's own `tokens` field, when the producer
// set it, wins over the estimate.
//
// The text part of the estimate is a [Counter]. [Text], [Message], [Estimate], [Messages]
// and [Entries] use [Chars4]; their -With variants take any Counter, such as the exact
// OpenAI tokenizer in the bpe subpackage, and keep the same fixed costs.
package tokens
