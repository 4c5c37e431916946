package image

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
)

// The SBOM is an SPDX 2.3 document in JSON: the image, the seqctl module in it, the Go
// standard library it was built with, and every module linked into the binaries, each
// with its package URL. It is read from the Go build information of the binaries (the
// module graph the toolchain recorded), not from go.mod, so it lists what is in the image.

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo,omitempty"`
	Supplier         string        `json:"supplier,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	CopyrightText    string        `json:"copyrightText"`
	PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
	Comment          string        `json:"comment,omitempty"`
	ExternalRefs     []spdxExtRef  `json:"externalRefs,omitempty"`
	Checksums        []spdxSummary `json:"checksums,omitempty"`
}

type spdxExtRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxSummary struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

const noAssertion = "NOASSERTION"

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(kind, name, version string) string {
	return "SPDXRef-" + kind + "-" + spdxIDUnsafe.ReplaceAllString(name+"-"+version, "-")
}

// SBOM returns the SPDX JSON document of an image built from cfg.
func SBOM(cfg Config) ([]byte, error) {
	imageID := spdxID("Image", "seqctl", cfg.Version)
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              "seqctl-image-" + cfg.Version,
		DocumentNamespace: fmt.Sprintf("%s/sbom/image/%s/%s", strings.TrimSuffix(cfg.Source, "/"), cfg.Version, cfg.Revision),
		CreationInfo: spdxCreationInfo{
			Created:  cfg.Created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: seqctl-image", "Organization: seqctl"},
		},
		Packages: []spdxPackage{{
			Name: "seqctl", SPDXID: imageID, VersionInfo: cfg.Version, DownloadLocation: cfg.Source,
			LicenseConcluded: noAssertion, LicenseDeclared: spdxLicense(cfg.Licenses), CopyrightText: noAssertion,
			PrimaryPurpose: "CONTAINER",
			Comment:        "OCI image index of " + strings.Join(sortedKeys(cfg.Binaries), ", "),
		}},
		Relationships: []spdxRelationship{{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: imageID}},
	}
	seen := map[string]bool{}
	add := func(pkg spdxPackage, rel spdxRelationship) {
		if seen[pkg.SPDXID] {
			return
		}
		seen[pkg.SPDXID] = true
		doc.Packages = append(doc.Packages, pkg)
		doc.Relationships = append(doc.Relationships, rel)
	}
	for _, platform := range sortedKeys(cfg.Binaries) {
		bi, err := buildinfo.ReadFile(cfg.Binaries[platform])
		if err != nil {
			return nil, fmt.Errorf("image: build information of %s: %w", cfg.Binaries[platform], err)
		}
		mainVersion := bi.Main.Version
		if mainVersion == "" || mainVersion == "(devel)" {
			mainVersion = cfg.Version
		}
		mainID := spdxID("Module", bi.Main.Path, mainVersion)
		add(spdxPackage{
			Name: bi.Main.Path, SPDXID: mainID, VersionInfo: mainVersion, DownloadLocation: cfg.Source,
			LicenseConcluded: noAssertion, LicenseDeclared: spdxLicense(cfg.Licenses), CopyrightText: noAssertion,
			PrimaryPurpose: "APPLICATION",
			ExternalRefs:   []spdxExtRef{purl(bi.Main.Path, mainVersion)},
		}, spdxRelationship{Element: imageID, Type: "CONTAINS", Related: mainID})
		goID := spdxID("Module", "stdlib", bi.GoVersion)
		add(spdxPackage{
			Name: "stdlib", SPDXID: goID, VersionInfo: bi.GoVersion, DownloadLocation: "https://go.dev/dl/",
			LicenseConcluded: noAssertion, LicenseDeclared: "BSD-3-Clause", CopyrightText: noAssertion,
			ExternalRefs: []spdxExtRef{purl("stdlib", bi.GoVersion)},
		}, spdxRelationship{Element: mainID, Type: "DEPENDS_ON", Related: goID})
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			id := spdxID("Module", d.Path, d.Version)
			pkg := spdxPackage{
				Name: d.Path, SPDXID: id, VersionInfo: d.Version, DownloadLocation: noAssertion,
				LicenseConcluded: noAssertion, LicenseDeclared: noAssertion, CopyrightText: noAssertion,
				ExternalRefs: []spdxExtRef{purl(d.Path, d.Version)},
			}
			if d.Sum != "" {
				pkg.Comment = "go.sum " + d.Sum
			}
			add(pkg, spdxRelationship{Element: mainID, Type: "DEPENDS_ON", Related: id})
		}
	}
	return json.MarshalIndent(doc, "", "  ")
}

func purl(path, version string) spdxExtRef {
	return spdxExtRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + path + "@" + version}
}

func spdxLicense(l string) string {
	if l == "" {
		return noAssertion
	}
	return l
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
