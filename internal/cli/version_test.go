package cli

import (
	"runtime/debug"
	"testing"
)

// An unstamped binary names the code it was built from, from what the Go
// toolchain recorded.
func TestVersionFromBuildInfo(t *testing.T) {
	vcs := func(revision, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: revision}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "174df55c0e803c369acf0123456789abcdef0123"
	for _, tc := range []struct {
		name     string
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"go install ...@v0.4.0", "v0.4.0", nil, "v0.4.0"},
		{"go install ...@commit", "v0.0.0-20260102150405-174df55c0e80", nil, "v0.0.0-20260102150405-174df55c0e80"},
		{"a clean checkout at a release tag", "v0.4.0", vcs(rev, "false"), "v0.4.0"},
		{"a modified checkout at a release tag", "v0.4.0+dirty", vcs(rev, "true"), "v0.4.0+dirty"},
		{"a clean checkout between tags", "v0.4.1-0.20260102150405-174df55c0e80", vcs(rev, "false"), "devel+174df55c0e80"},
		{"a modified checkout", "v0.0.0-20260102150405-174df55c0e80+dirty", vcs(rev, "true"), "devel+174df55c0e80-dirty"},
		{"go build in the module, Go before 1.24", "(devel)", vcs(rev, "false"), "devel+174df55c0e80"},
		{"-buildvcs=false", "(devel)", nil, "devel"},
		{"go test", "", nil, "devel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := &debug.BuildInfo{Path: "github.com/leaseguard/leaseguard/cmd/leaseguard", Settings: tc.settings}
			info.Main.Path, info.Main.Version = "github.com/leaseguard/leaseguard", tc.version
			if got := VersionFromBuildInfo(info); got != tc.want {
				t.Errorf("VersionFromBuildInfo: %q, want %q", got, tc.want)
			}
		})
	}
	if got := VersionFromBuildInfo(nil); got != "devel" {
		t.Errorf("no build info: %q, want devel", got)
	}
}

// What was stamped wins; unstamped, the build info answers.
func TestVersionStampedOrBuildInfo(t *testing.T) {
	if got := Version("v0.4.0"); got != "v0.4.0" {
		t.Errorf("stamped v0.4.0: %q", got)
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	if got, want := Version(""), VersionFromBuildInfo(info); got != want || got == "" {
		t.Errorf("unstamped: %q, want %q", got, want)
	}
}
