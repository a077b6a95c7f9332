package secretscan

// Patterns to register with GitHub's secret-scanning partner programme
// (docs: leaks). \b on both sides keeps a key inside a longer word
// (xsvc_live_…, a 37th character) from matching. What a pattern cannot
// say, the checksum does: the last 6 characters are the CRC-32 (IEEE) of
// everything before them, in base62 (0-9A-Za-z), left-padded with '0';
// keygate checks it before any lookup (keystore.Parse,
// keystore.ParseAdminToken) and labels a mismatch false_positive.
const (
	// KeyPattern matches live and test API keys: svc_live_ or svc_test_
	// and 36 base62 characters (30 random, 6 of checksum).
	KeyPattern = `\bsvc_(?:live|test)_[0-9A-Za-z]{36}\b`
	// LiveKeyPattern and TestKeyPattern register the two environments
	// as two token types, so that GitHub's alerts say which it found.
	LiveKeyPattern = `\bsvc_live_[0-9A-Za-z]{36}\b`
	TestKeyPattern = `\bsvc_test_[0-9A-Za-z]{36}\b`
	// AdminTokenPattern matches admin tokens: kga_ and 36 base62
	// characters.
	AdminTokenPattern = `\bkga_[0-9A-Za-z]{36}\b`
)
