package driver

// CacheTransform is the driver's cache transform, for tests that read as its cache does.
var CacheTransform = cacheTransform()
