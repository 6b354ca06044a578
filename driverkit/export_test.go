package driverkit

// ForgetImportOrigins empties the table of imported Backups' origins, as a restarted driver's is
// before its cache has synced.
func ForgetImportOrigins() {
	origins.Lock()
	clear(origins.m)
	origins.Unlock()
}
