// Package docs keeps the documentation true to the code. Its test reads the repository's
// markdown (README.md, docs/*.md, charts/hami-go/README.md, the READMEs under hack/ and test/;
// not the generated docs/bench/report.md) and checks that
//
//   - every Go test they cite (TestXxx, BenchmarkXxx, FuzzXxx) is a func in some _test.go of the
//     repository;
//   - every repository path they cite (pkg/…, cmd/…, hack/…, test/…, docs/…, charts/…) and every
//     relative link's target exists;
//   - every case id they cite (C07) is a case of docs/cases.md, every case of docs/cases.md is
//     cited by a test (its name or a comment in a _test.go), and docs/cases.md names each test
//     after the file or package that holds it;
//   - the README's component table names every package under pkg/.
//
// It reads files only and runs in `go test ./...`.
package docs
