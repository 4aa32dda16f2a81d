package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// plugins/leaseguard.yaml, the krew-release-bot template, renders to a
// krew Plugin for linux and darwin on amd64 and arm64, each installing this
// command as kubectl-leaseguard. The bot's placeholders are expanded here
// as the bot expands them: .TagName to the tag, addURIAndSha to the uri
// (with the tag) and a sha256.
func TestKrewManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "plugins", "leaseguard.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const tag = "v1.2.3"
	addURIAndSha := regexp.MustCompile(`\{\{ ?addURIAndSha "([^"]+)" \.TagName ?\}\}`)
	text := addURIAndSha.ReplaceAllStringFunc(string(data), func(m string) string {
		uri := addURIAndSha.FindStringSubmatch(m)[1]
		return "uri: " + strings.ReplaceAll(uri, "{{ .TagName }}", tag) + "\n    sha256: " + strings.Repeat("ab", 32)
	})
	text = strings.ReplaceAll(text, "{{ .TagName }}", tag)
	if strings.Contains(text, "{{") {
		t.Fatalf("a placeholder krew-release-bot does not expand is left:\n%s", text)
	}
	var plugin struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				Sha256 string `json:"sha256"`
				Bin    string `json:"bin"`
				Files  []struct {
					From string `json:"from"`
					To   string `json:"to"`
				} `json:"files"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict([]byte(text), &plugin); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if plugin.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || plugin.Kind != "Plugin" ||
		plugin.Metadata.Name != "leaseguard" || plugin.Spec.Version != tag ||
		plugin.Spec.ShortDescription == "" || plugin.Spec.Homepage == "" {
		t.Errorf("apiVersion %q, kind %q, name %q, version %q", plugin.APIVersion, plugin.Kind, plugin.Metadata.Name, plugin.Spec.Version)
	}
	want := map[string]bool{"linux/amd64": true, "linux/arm64": true, "darwin/amd64": true, "darwin/arm64": true}
	for _, p := range plugin.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		if !want[platform] {
			t.Errorf("platform %s: unexpected or repeated", platform)
		}
		delete(want, platform)
		if p.Bin != "kubectl-leaseguard" || len(p.Files) != 1 || p.Files[0].From != "kubectl-leaseguard" ||
			!strings.Contains(p.URI, "/"+tag+"/") || !strings.HasSuffix(p.URI, strings.ReplaceAll(platform, "/", "_")+".tar.gz") || len(p.Sha256) != 64 {
			t.Errorf("platform %s: bin %q, files %v, uri %q", platform, p.Bin, p.Files, p.URI)
		}
	}
	if len(want) > 0 {
		t.Errorf("platforms missing: %v", want)
	}
}
