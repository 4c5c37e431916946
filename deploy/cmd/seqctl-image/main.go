// Command seqctl-image writes the seqctl container image as an OCI image layout, with
// its SPDX SBOM beside it, from static seqctl binaries built beforehand (`make image`
// builds them and runs it). It needs no container runtime and no registry:
//
//	seqctl-image --out dist/image --sbom dist/image.spdx.json \
//	    --binary linux/amd64=dist/image-bin/linux_amd64/seqctl \
//	    --binary linux/arm64=dist/image-bin/linux_arm64/seqctl \
//	    --version v0.3.0 --revision 4d5b75e --created 2026-12-07T15:00:00Z
//
// The layout loads with `skopeo copy oci:dist/image:v0.3.0 docker://REGISTRY/seqctl:v0.3.0`
// or `crane push dist/image REGISTRY/seqctl:v0.3.0`.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/seqctl/seqctl/deploy/image"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "seqctl-image:", err)
		os.Exit(1)
	}
}

type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaries) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	if !ok || platform == "" || path == "" {
		return fmt.Errorf("want PLATFORM=PATH, e.g. linux/amd64=bin/seqctl, got %q", v)
	}
	b[platform] = path
	return nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("seqctl-image", flag.ContinueOnError)
	cfg := image.Config{Binaries: binaries{}}
	out := fs.String("out", "dist/image", "directory of the OCI image layout (replaced)")
	sbom := fs.String("sbom", "dist/image.spdx.json", "path of the SPDX JSON SBOM")
	created := fs.String("created", "", "creation time, RFC 3339 (default: now); the commit time makes digests reproducible")
	fs.Var(binaries(cfg.Binaries), "binary", "PLATFORM=PATH of a static seqctl, once per platform")
	fs.StringVar(&cfg.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle copied into the image")
	fs.StringVar(&cfg.Version, "version", "dev", "org.opencontainers.image.version, and the layout's ref name")
	fs.StringVar(&cfg.Revision, "revision", "unknown", "org.opencontainers.image.revision (the commit)")
	fs.StringVar(&cfg.Source, "source", "https://github.com/seqctl/seqctl", "org.opencontainers.image.source")
	fs.StringVar(&cfg.Licenses, "licenses", "Apache-2.0", "org.opencontainers.image.licenses (SPDX expression)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Created = time.Now().UTC().Truncate(time.Second)
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			return fmt.Errorf("--created: %w", err)
		}
		cfg.Created = t.UTC()
	}
	idx, err := image.Build(cfg)
	if err != nil {
		return err
	}
	if err := image.WriteLayout(*out, cfg.Version, idx); err != nil {
		return err
	}
	doc, err := image.SBOM(cfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*sbom, append(doc, '\n'), 0o644); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s (%d platforms), SBOM %s\n", *out, d, len(cfg.Binaries), *sbom)
	return nil
}
