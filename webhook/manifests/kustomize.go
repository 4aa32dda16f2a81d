package manifests

import (
	"bytes"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// KustomizePatch renders the configuration as strategic-merge patches for a
// kustomize overlay of config/default that replaces the policy ConfigMap:
// the overlay's webhook configurations must then select what its policy's
// rules select, not what config/manager/policy.yaml's do (config/e2e-policy
// is one such overlay).
//
// Each patch keeps what the base's build decided and the policy does not:
// the Service's name and namespace, the CA bundle and the annotations that
// inject it. Everything the policy decides is replaced whole (rules,
// namespaceSelector, matchConditions, failurePolicy, timeouts), webhooks the
// policy does not need are deleted, and so is the coalescing policy when no
// rule coalesces. The base must have every object and webhook the patch
// keeps: config/default renders all of them.
func (r *Rendered) KustomizePatch(header string) ([]byte, error) {
	type doc = map[string]any
	var docs []doc
	toMap := func(obj any) (doc, error) {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("rendering %T: %w", obj, err)
		}
		var m doc
		if err := yaml.Unmarshal(data, &m); err != nil {
			return nil, err
		}
		return m, nil
	}
	ref := func(kind, name string) doc {
		return doc{"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": doc{"name": name}}
	}
	deleted := func(kind, name string) doc {
		d := ref(kind, name)
		d["$patch"] = "delete"
		return d
	}
	// webhooks turns a configuration into a patch of its webhooks, keyed by
	// name, clientConfig reduced to the path. kustomize replaces the lists of
	// a webhook (rules, matchConditions) whole; the selectors are maps, which
	// it would merge, so they say so.
	webhooks := func(cfg any, kind, name string, known []string) (doc, error) {
		m, err := toMap(cfg)
		if err != nil {
			return nil, err
		}
		out := ref(kind, name)
		var list []any
		present := map[string]bool{}
		hooks, _ := m["webhooks"].([]any)
		for _, h := range hooks {
			w := h.(doc)
			present[w["name"].(string)] = true
			if cc, ok := w["clientConfig"].(doc); ok {
				if svc, ok := cc["service"].(doc); ok {
					w["clientConfig"] = doc{"service": doc{"path": svc["path"]}}
				} else {
					w["clientConfig"] = doc{"url": cc["url"]}
				}
			}
			for _, field := range []string{"namespaceSelector", "objectSelector"} {
				if s, ok := w[field].(doc); ok {
					s["$patch"] = "replace"
				}
			}
			list = append(list, w)
		}
		for _, n := range known {
			if !present[n] {
				list = append(list, doc{"name": n, "$patch": "delete"})
			}
		}
		out["webhooks"] = list
		return out, nil
	}

	prefix := strings.TrimSuffix(r.Validating.Name, "-validating-webhook-configuration")
	mapName := prefix + "-coalesce-renewals"
	if r.Coalescing != nil {
		for _, obj := range []any{r.Coalescing, r.CoalescingBinding} {
			m, err := toMap(obj)
			if err != nil {
				return nil, err
			}
			delete(m["metadata"].(doc), "labels")
			m["spec"].(doc)["$patch"] = "replace"
			docs = append(docs, m)
		}
	} else {
		docs = append(docs, deleted("MutatingAdmissionPolicy", mapName), deleted("MutatingAdmissionPolicyBinding", mapName))
	}
	v, err := webhooks(r.Validating, "ValidatingWebhookConfiguration", r.Validating.Name, []string{ValidateWebhook, RenewalsWebhook})
	if err != nil {
		return nil, err
	}
	docs = append(docs, v)
	mutatingName := prefix + "-mutating-webhook-configuration"
	if r.Mutating != nil {
		m, err := webhooks(r.Mutating, "MutatingWebhookConfiguration", mutatingName, []string{DesignateWebhook})
		if err != nil {
			return nil, err
		}
		docs = append(docs, m)
	} else {
		docs = append(docs, deleted("MutatingWebhookConfiguration", mutatingName))
	}

	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		b.WriteString("# " + line + "\n")
	}
	for _, n := range r.Notes {
		b.WriteString("# NOTE: " + n + "\n")
	}
	for _, d := range docs {
		data, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.Bytes(), nil
}
