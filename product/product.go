// Package product names the two products keygate guards, once: the
// extraction backend (POST /sync) and the schema registry (/registry/...).
// Keys, token scopes, routes, upstreams and configuration all use these
// names.
package product

// The products.
const (
	Extraction = "extraction"
	Registry   = "registry"
)

// All lists the products, in a fixed order.
func All() []string { return []string{Extraction, Registry} }

// Valid reports whether p names a product.
func Valid(p string) bool { return p == Extraction || p == Registry }
