// Package tokens estimates how many tokens messages take in a model's context.
//
// The estimate every Compactor client shares is a quarter of the number of characters
// (Unicode code points) of the text, rounded up, plus a fixed cost per message, per tool
// call and per non-text content part. A message's own `tokens` field, when the producer
// set it, wins over the estimate, but never goes below [Floor], a token per 8 UTF-8
// bytes of the message's text (of its object's size, for a stub): a declared count is a
// hint, and a producer that marks 900 KB as one token does not hide it from a budget.
//
// The text part of the estimate is a [Counter]. [Text], [Message], [Estimate], [Messages]
// and [Entries] use [Chars4]; their -With variants take any Counter, such as the exact
// OpenAI tokenizer in the bpe subpackage, and keep the same fixed costs.
package tokens
