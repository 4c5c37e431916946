package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var platforms = []string{"linux/amd64", "linux/arm64"}

// standIns cross-compiles a small static Go program for each platform: it stands in
// for seqctl, whose cross-compilation from an empty build cache takes minutes (make
// image builds the real one, and TestSnapshotImage reads it).
func standIns(tb testing.TB) map[string]string {
	tb.Helper()
	dir := tb.TempDir()
	src := map[string]string{
		"go.mod":  "module example.com/standin\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() { println(\"seqctl stand-in\") }\n",
	}
	for name, body := range src {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	out := map[string]string{}
	for _, p := range platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		bin := filepath.Join(dir, goos+"_"+goarch, "seqctl")
		build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
		build.Dir = dir
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=-buildvcs=false")
		if b, err := build.CombinedOutput(); err != nil {
			tb.Fatalf("go build %s: %v\n%s", p, err, b)
		}
		out[p] = bin
	}
	return out
}

func testConfig(bins map[string]string) Config {
	return Config{
		Binaries: bins,
		CACerts:  "/etc/ssl/certs/ca-certificates.crt",
		Version:  "v0.0.0-test",
		Revision: "0123456789ab",
		Source:   "https://github.com/seqctl/seqctl",
		Licenses: "Apache-2.0",
		Created:  time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC),
	}
}

func TestBuildWritesAnIndexOfNonRootImages(t *testing.T) {
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err != nil {
		t.Skip("no CA bundle at /etc/ssl/certs/ca-certificates.crt (Debian: apt-get install ca-certificates)")
	}
	cfg := testConfig(standIns(t))
	idx, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image")
	if err := WriteLayout(dir, cfg.Version, idx); err != nil {
		t.Fatal(err)
	}
	checkLayout(t, dir, cfg.Version)

	again, err := Build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := idx.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: digests %s and %s", d1, d2)
	}

	doc, err := SBOM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkSBOM(t, doc, "example.com/standin")
}

// TestSnapshotImage reads the image `make image` wrote (dist/image); it skips when there
// is none.
func TestSnapshotImage(t *testing.T) {
	dir := filepath.Join("..", "..", "dist", "image")
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		t.Skip("no dist/image: make image builds it")
	}
	checkLayout(t, dir, "")
	doc, err := os.ReadFile(filepath.Join("..", "..", "dist", "image.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	checkSBOM(t, doc, "github.com/seqctl/seqctl")
}

func TestBuildRefusesABinaryOfAnotherPlatform(t *testing.T) {
	bins := standIns(t)
	cfg := testConfig(map[string]string{"linux/arm64": bins["linux/amd64"]})
	if _, err := Build(cfg); err == nil || !strings.Contains(err.Error(), "not linux/arm64") {
		t.Errorf("Build of an amd64 binary as linux/arm64: err = %v", err)
	}
}

// checkLayout checks the OCI layout in dir: one index, named version (any when ""), of
// an image per platform that runs /seqctl as the nonroot user and carries the OCI labels.
func checkLayout(t *testing.T, dir, version string) {
	t.Helper()
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("index.json: %+v, want one OCI image index", rm.Manifests)
	}
	ref := rm.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	if version == "" {
		version = ref
	}
	if ref != version {
		t.Errorf("ref name %q, want %q", ref, version)
	}
	idx, err := root.ImageIndex(rm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range im.Manifests {
		if m.Platform == nil {
			t.Fatalf("manifest %s without a platform", m.Digest)
		}
		p := m.Platform.OS + "/" + m.Platform.Architecture
		got = append(got, p)
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, p, img, version)
	}
	if diff := cmp.Diff(platforms, got); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}
}

func checkImage(t *testing.T, platform string, img v1.Image, version string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.OS + "/" + cf.Architecture; got != platform {
		t.Errorf("%s: config platform %s", platform, got)
	}
	if cf.Config.User != User || !slices.Equal(cf.Config.Entrypoint, []string{"/seqctl"}) {
		t.Errorf("%s: user %q, entrypoint %q; want %q and [/seqctl]", platform, cf.Config.User, cf.Config.Entrypoint, User)
	}
	for _, k := range []string{LabelVersion, LabelRevision, LabelSource, LabelCreated, LabelLicenses} {
		if cf.Config.Labels[k] == "" {
			t.Errorf("%s: label %s missing", platform, k)
		}
	}
	if cf.Config.Labels[LabelVersion] != version {
		t.Errorf("%s: version label %q, want %q", platform, cf.Config.Labels[LabelVersion], version)
	}
	files := readFiles(t, img)
	if !strings.Contains(string(files["etc/passwd"].body), "nonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd has no nonroot user:\n%s", platform, files["etc/passwd"].body)
	}
	if len(files["etc/ssl/certs/ca-certificates.crt"].body) == 0 {
		t.Errorf("%s: no CA certificates", platform)
	}
	bin, ok := files["seqctl"]
	if !ok || bin.mode&0o111 == 0 {
		t.Fatalf("%s: no executable /seqctl", platform)
	}
	f, err := elf.NewFile(bytes.NewReader(bin.body))
	if err != nil {
		t.Fatalf("%s: /seqctl: %v", platform, err)
	}
	if f.Machine != elfMachine[cf.Architecture] {
		t.Errorf("%s: /seqctl is for %v", platform, f.Machine)
	}
}

// readFiles returns the regular files of an image's layers.
func readFiles(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]file{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				out[h.Name] = file{name: h.Name, mode: h.Mode, body: b}
			}
		}
		rc.Close()
	}
	return out
}

func checkSBOM(t *testing.T, doc []byte, mainModule string) {
	t.Helper()
	var d spdxDocument
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if d.SPDXVersion != "SPDX-2.3" || d.DataLicense != "CC0-1.0" || d.SPDXID != "SPDXRef-DOCUMENT" {
		t.Errorf("SBOM header: %s %s %s", d.SPDXVersion, d.DataLicense, d.SPDXID)
	}
	names := map[string]bool{}
	for _, p := range d.Packages {
		names[p.Name] = true
		if p.Name != "seqctl" && (len(p.ExternalRefs) != 1 || !strings.HasPrefix(p.ExternalRefs[0].Locator, "pkg:golang/")) {
			t.Errorf("SBOM package %s: external refs %+v, want its purl", p.Name, p.ExternalRefs)
		}
	}
	for _, want := range []string{"seqctl", mainModule, "stdlib"} {
		if !names[want] {
			t.Errorf("SBOM lacks package %s", want)
		}
	}
	if len(d.Relationships) != len(d.Packages) {
		t.Errorf("SBOM: %d relationships for %d packages", len(d.Relationships), len(d.Packages))
	}
}
