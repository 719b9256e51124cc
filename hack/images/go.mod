module github.com/hami-go/hami-go/hack/images

go 1.26.8

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/spf13/pflag v1.1.0
)

require (
	github.com/docker/docker-credential-helpers v0.9.5 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
