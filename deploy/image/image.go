// Package image builds the seqctl container image without a container runtime: an OCI
// image index of static seqctl binaries, one image per platform, on no base image, written
// as an OCI image layout, with an SPDX SBOM read from the binaries' Go build information.
//
// Each image has two layers: the files every image shares (/etc/passwd and /etc/group
// with the nonroot user, uid and gid 65532; the CA certificates; an empty /tmp) and
// /seqctl. Its config runs /seqctl as 65532:65532 and carries the OCI labels (version,
// revision, source, created, licenses). The same inputs give the same digests: every
// file time is the Created time.
package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: distroless's nonroot.
const (
	UID      = 65532
	User     = "65532:65532"
	userName = "nonroot"
)

// Entrypoint is where the binary lives in the image and what the image runs.
const Entrypoint = "/seqctl"

// OCI label (and index annotation) keys.
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelCreated  = "org.opencontainers.image.created"
	LabelLicenses = "org.opencontainers.image.licenses"
	LabelTitle    = "org.opencontainers.image.title"
	refNameKey    = "org.opencontainers.image.ref.name"
)

// Config is what an image is built from.
type Config struct {
	// Binaries maps a platform ("linux/amd64", "linux/arm64") to the path of a static
	// seqctl built for it. Build refuses a binary that is not a static ELF of that
	// platform.
	Binaries map[string]string
	// CACerts is the path of the CA bundle copied to /etc/ssl/certs/ca-certificates.crt.
	CACerts string
	// Version, Revision, Source and Licenses fill the OCI labels; Created is the image's
	// creation time, and the time of every file (the commit time gives reproducible
	// digests).
	Version, Revision, Source, Licenses string
	Created                             time.Time
}

// Build returns the image index of cfg, one image per platform, sorted by platform.
func Build(cfg Config) (v1.ImageIndex, error) {
	if len(cfg.Binaries) == 0 {
		return nil, fmt.Errorf("image: no binary given")
	}
	ca, err := os.ReadFile(cfg.CACerts)
	if err != nil {
		return nil, fmt.Errorf("image: CA certificates: %w", err)
	}
	base, err := layer(cfg.Created, baseFiles(ca))
	if err != nil {
		return nil, err
	}
	labels := cfg.labels()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	platforms := make([]string, 0, len(cfg.Binaries))
	for p := range cfg.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	for _, p := range platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil {
			return nil, fmt.Errorf("image: platform %q: %w", p, err)
		}
		bin, err := readStatic(cfg.Binaries[p], plat)
		if err != nil {
			return nil, err
		}
		binLayer, err := layer(cfg.Created, []file{{name: strings.TrimPrefix(Entrypoint, "/"), mode: 0o755, body: bin}})
		if err != nil {
			return nil, err
		}
		img, err := platformImage(plat, labels, cfg.Created, base, binLayer)
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
	}
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

func (c Config) labels() map[string]string {
	return map[string]string{
		LabelTitle:    "seqctl",
		LabelVersion:  c.Version,
		LabelRevision: c.Revision,
		LabelSource:   c.Source,
		LabelCreated:  c.Created.UTC().Format(time.RFC3339),
		LabelLicenses: c.Licenses,
	}
}

func platformImage(plat *v1.Platform, labels map[string]string, created time.Time, layers ...v1.Layer) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Created = v1.Time{Time: created}
	cf.Author = "seqctl"
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{Entrypoint},
		WorkingDir: "/",
		Env:        []string{"PATH=/", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Labels:     labels,
	}
	cf.History = nil
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return img, nil
}

// elfMachine is the ELF machine of each architecture the image is built for.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// readStatic reads a binary and checks that it is a statically linked ELF executable of
// the platform: the image has no dynamic loader and no libc.
func readStatic(path string, plat *v1.Platform) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("image: %s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	if plat.OS != "linux" || f.Machine != elfMachine[plat.Architecture] {
		return nil, fmt.Errorf("image: %s is an ELF for %v, not %s", path, f.Machine, plat)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("image: %s is dynamically linked: build it with CGO_ENABLED=0", path)
		}
	}
	return b, nil
}

// file is one entry of a layer: a regular file with body, or a directory.
type file struct {
	name string
	mode int64
	dir  bool
	body []byte
}

func baseFiles(ca []byte) []file {
	return []file{
		{name: "etc", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, UID, UID, userName, userName)},
		{name: "etc/group", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", userName, UID)},
		{name: "etc/ssl", mode: 0o755, dir: true},
		{name: "etc/ssl/certs", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: ca},
		{name: "home", mode: 0o755, dir: true},
		{name: "home/" + userName, mode: 0o700, dir: true},
		{name: "tmp", mode: 0o1777, dir: true},
	}
}

// layer makes a gzip-compressed OCI layer of files, owned by root except the nonroot
// user's home.
func layer(mtime time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: mtime, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.body))}
		if f.dir {
			h.Typeflag, h.Name, h.Size = tar.TypeDir, f.name+"/", 0
		}
		if f.name == "home/"+userName {
			h.Uid, h.Gid = UID, UID
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return l, nil
}

// WriteLayout writes idx as an OCI image layout in dir (replacing what is there), its
// index.json naming it by ref (the version).
func WriteLayout(dir, ref string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameKey: ref})); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}
