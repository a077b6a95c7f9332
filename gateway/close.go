package gateway

// Close releases the gateway's upstream connections: the idle ones at
// once, those in use as their requests end. Call it once the server has
// stopped handing the gateway requests (http.Server.Shutdown returned);
// a request that still comes is served, on an upstream connection that
// is closed after it. Close always returns nil; it may be called more
// than once.
func (g *Gateway) Close() error {
	g.proxy.extraction.up.close()
	g.proxy.registry.up.close()
	return nil
}
