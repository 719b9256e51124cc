// Package docs keeps the documentation true to the code: its test reads README.md, docs/*.md and
// charts/hami-go/README.md and checks that every Go test they cite (TestXxx, BenchmarkXxx,
// FuzzXxx) is a func in some _test.go of the repository, every repository path they cite (pkg/…,
// cmd/…, hack/…, test/…, docs/…, charts/…, and their relative links) exists, every case id they
// cite (C07) is a case of docs/cases.md, every case of docs/cases.md is cited by a test (its
// name or a comment in a _test.go), docs/cases.md names each test after the file or package that
// holds it, and the README's component table names every package under pkg/. It reads files
// only and runs in `go test ./...`.
package docs
