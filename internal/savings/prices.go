package savings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	// Input is an input token neither read from nor written to the prompt cache.
	Input float64 `json:"input"`
	// CachedInput is an input token read from the prompt cache.
	CachedInput float64 `json:"cached_input"`
	// CacheWrite is an input token written to the prompt cache; 0 says the provider
	// does not charge writes (they cost nothing more than Input), and then no cache
	// write is modelled for this model either (see Side).
	CacheWrite float64 `json:"cache_write"`
	// Output is an output token.
	Output float64 `json:"output"`
}

// Prices is a price table: a price per model, matched exactly, then by the longest
// pattern that ends in "*" and whose text before it starts the model's name, then
// Default (when set).
type Prices struct {
	Models  map[string]Price `json:"models"`
	Default *Price           `json:"default,omitempty"`
}

// MaxPricesBytes bounds a price table file.
const MaxPricesBytes = 1 << 20

// maxPrice bounds one price: a million dollars per million tokens is no model's.
const maxPrice = 1e6

// ErrPrices is matched by every error of a price table that does not validate.
var ErrPrices = errors.New("invalid price table")

// ReadPrices reads and validates the price table in the JSON file at path.
func ReadPrices(path string) (*Prices, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPricesBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxPricesBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrPrices, path, MaxPricesBytes)
	}
	p, err := ParsePrices(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// rawPrice is a price as written: every field must be given.
type rawPrice struct {
	Input       *float64 `json:"input"`
	CachedInput *float64 `json:"cached_input"`
	CacheWrite  *float64 `json:"cache_write"`
	Output      *float64 `json:"output"`
}

// ParsePrices decodes and validates a price table: unknown fields, a missing or
// negative price, an empty model name, a "*" anywhere but at a pattern's end, and
// anything after the table are refused.
func ParsePrices(data []byte) (*Prices, error) {
	var raw struct {
		// Note is free text for the people who keep the table (where its prices
		// come from, when they were last checked); it is not read.
		Note    string              `json:"note"`
		Models  map[string]rawPrice `json:"models"`
		Default *rawPrice           `json:"default"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPrices, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: more than one JSON document", ErrPrices)
	}
	if raw.Models == nil && raw.Default == nil {
		return nil, fmt.Errorf("%w: no \"models\" and no \"default\": it prices nothing", ErrPrices)
	}
	p := &Prices{Models: make(map[string]Price, len(raw.Models))}
	for name, rp := range raw.Models {
		if name == "" || strings.TrimSpace(name) != name || len(name) > 128 {
			return nil, fmt.Errorf("%w: model %q: want a model name of 1 to 128 bytes, no spaces around it", ErrPrices, name)
		}
		if i := strings.IndexByte(name, '*'); i >= 0 && i != len(name)-1 {
			return nil, fmt.Errorf("%w: model %q: a \"*\" may only end a pattern", ErrPrices, name)
		}
		price, err := rp.price()
		if err != nil {
			return nil, fmt.Errorf("%w: model %q: %w", ErrPrices, name, err)
		}
		p.Models[name] = price
	}
	if raw.Default != nil {
		price, err := raw.Default.price()
		if err != nil {
			return nil, fmt.Errorf("%w: default: %w", ErrPrices, err)
		}
		p.Default = &price
	}
	return p, nil
}

func (rp rawPrice) price() (Price, error) {
	var out Price
	for _, f := range []struct {
		name string
		v    *float64
		to   *float64
	}{{"input", rp.Input, &out.Input}, {"cached_input", rp.CachedInput, &out.CachedInput},
		{"cache_write", rp.CacheWrite, &out.CacheWrite}, {"output", rp.Output, &out.Output}} {
		switch {
		case f.v == nil:
			return Price{}, fmt.Errorf("%s: missing (write 0 for free)", f.name)
		case *f.v < 0 || *f.v > maxPrice || math.IsNaN(*f.v):
			return Price{}, fmt.Errorf("%s: %v: want 0 to %v dollars per million tokens", f.name, *f.v, float64(maxPrice))
		}
		*f.to = *f.v
	}
	return out, nil
}

// For returns model's price: its exact entry, else the longest matching pattern, else
// the default; nil when none (the model is unpriced). A nil table prices nothing.
func (p *Prices) For(model string) *Price {
	if p == nil {
		return nil
	}
	if pr, ok := p.Models[model]; ok && !strings.HasSuffix(model, "*") {
		return &pr
	}
	best := -1
	var found Price
	for name, pr := range p.Models {
		prefix, ok := strings.CutSuffix(name, "*")
		if ok && strings.HasPrefix(model, prefix) && len(prefix) > best {
			best, found = len(prefix), pr
		}
	}
	if best >= 0 {
		return &found
	}
	return p.Default
}
