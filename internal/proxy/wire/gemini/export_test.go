package gemini

// Dedupe is dedupe, for the external tests.
var Dedupe = dedupe
