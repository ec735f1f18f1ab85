// Package view is a read-only web view of the pipeline for people: the conversations
// with their token gauge against the threshold, and per conversation the timeline of
// its compactions, its current summary and tail, and what each compaction folded away.
//
// Pages are rendered on the server with html/template and a small embedded style sheet;
// no script runs in the browser. Every page has a JSON twin under /api/ that holds the
// same data the page renders. The view only reads: it answers GET and HEAD, and
// nothing it serves changes anything.
//
// Conversation content is private: a View is run behind a credential (Config.Token,
// sent as a bearer token or as the password of HTTP basic authentication), or without
// one only for requests addressed to a loopback host. Every response carries strict
// security headers, and every value a page shows is escaped.
//
// A deployment serving tenants serves each tenant's View (Config.Tenant) under
// /t/<tenant>/ through one Tenants handler: the operator's credential opens every
// tenant, a tenant's own token its tenant only.
package view
