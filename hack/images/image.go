package main

import (
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hami-go/hami-go/hack/images/imagebuild"
)

// binaryImage makes a linux image of the base layers plus one layer holding bin as
// /usr/local/bin/<binName> (the entrypoint), /tmp, and minimal /etc/passwd and /etc/group
// (root, and nonroot = 65532, the uid the chart runs as).
func binaryImage(base []v1.Layer, binName, bin string) (v1.Image, error) {
	top, err := imagebuild.Layer([]imagebuild.File{
		{Path: "/etc", Dir: true, Mode: 0o755},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "/tmp", Dir: true, Mode: 0o1777},
		{Path: "/usr", Dir: true, Mode: 0o755},
		{Path: "/usr/local", Dir: true, Mode: 0o755},
		{Path: "/usr/local/bin", Dir: true, Mode: 0o755},
		{Path: "/usr/local/bin/" + binName, Mode: 0o755, Src: bin},
	})
	if err != nil {
		return nil, fmt.Errorf("%s layer: %w", binName, err)
	}
	return imagebuild.Image(append(base, top), v1.Config{
		Entrypoint: []string{"/usr/local/bin/" + binName},
		WorkingDir: "/",
		Labels:     map[string]string{"org.opencontainers.image.source": "https://github.com/hami-go/hami-go"},
	})
}
