package view

import (
	"embed"
	"fmt"
	"html/template"
	"maps"
	"strconv"
	"strings"
	"time"
)

// assets are the templates and the style sheet, built into the binary: the view needs
// no file at run time and no build step.
//
//go:embed templates/*.html static/view.css
var assets embed.FS

// funcs are the templates' formatting helpers. Everything they return is plain text
// that html/template escapes where it is used.
var funcs = template.FuncMap{
	"num": func(n any) string {
		switch n := n.(type) {
		case int:
			return thousands(strconv.FormatInt(int64(n), 10))
		case int64:
			return thousands(strconv.FormatInt(n, 10))
		case uint64:
			return thousands(strconv.FormatUint(n, 10))
		}
		return fmt.Sprint(n)
	},
	"when": func(t any) string {
		switch t := t.(type) {
		case time.Time:
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		case *time.Time:
			if t == nil || t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		return "—"
	},
	"ms": func(d *int64) string {
		if d == nil {
			return "—"
		}
		if *d < 1000 {
			return strconv.FormatInt(*d, 10) + " ms"
		}
		return strconv.FormatFloat(float64(*d)/1000, 'f', 1, 64) + " s"
	},
	"pct":  func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) + "%" },
	"prev": func(n int) int { return n - 1 },
	"next": func(n int) int { return n + 1 },
	"seqs": func(r *Range) string {
		if r == nil {
			return ""
		}
		if r.From == 0 {
			return "… – " + thousands(strconv.FormatUint(r.Through, 10))
		}
		return thousands(strconv.FormatUint(r.From, 10)) + " – " + thousands(strconv.FormatUint(r.Through, 10))
	},
	"from1": func(r *Range) uint64 { return max(r.From, 1) },
	// usd is a dollar figure of a row, with a "*" when only part of the row is priced.
	"usd": func(f float64, partial bool) string {
		s := "$" + strconv.FormatFloat(f, 'f', 4, 64)
		if f < 0 {
			s = "−$" + strconv.FormatFloat(-f, 'f', 4, 64)
		}
		if partial {
			s += "*"
		}
		return s
	},
	// savedPct is a net saving as a percentage of the tokens without Compactor.
	"savedPct": func(saved, without int64) string {
		if without == 0 {
			return "—"
		}
		return strconv.FormatFloat(100*float64(saved)/float64(without), 'f', 1, 64) + "%"
	},
	"day": func(t time.Time) string { return t.UTC().Format(time.DateOnly) },
	"orDeployment": func(tenant string) string {
		if tenant == "" {
			return "this deployment"
		}
		return tenant
	},
	"f2": func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
}

// thousands puts commas between groups of three digits.
func thousands(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// parseTemplates parses the templates for pages served under base (every link, form
// and asset starts with it: "" at the root), of tenant ("": the deployment's own), whose
// page at base/ is home (the navigation's first link: Conversations, or Tenants).
func parseTemplates(base, tenant, home string) (*template.Template, error) {
	fm := template.FuncMap{"base": func() string { return base }, "tenant": func() string { return tenant },
		"home": func() string { return home }}
	maps.Copy(fm, funcs)
	t, err := template.New("view").Funcs(fm).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("view templates: %w", err)
	}
	return t, nil
}
