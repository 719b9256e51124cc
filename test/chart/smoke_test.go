package chart_test

import (
	"os"
	"testing"
)

func TestSmoke(t *testing.T) {
	for name, v := range map[string]map[string]any{
		"default": nil,
		"local":   valuesFile(t, "values-local.yaml"),
		"kind":    valuesFile(t, "values-kind.yaml"),
		"cm":      sets(t, "webhook.certs.mode=certManager", "serviceMonitor.enabled=true", "devicePlugin.enforcement=mps", "scheduler.extender.bindAddress="),
	} {
		files, err := renderFiles(t, v)
		if err != nil {
			t.Fatal(name, err)
		}
		if os.Getenv("DUMP") == name {
			for k, v := range files {
				t.Logf("=== %s\n%s", k, v)
			}
		}
		r := decodeAll(t, files)
		t.Log(name, r.keys())
	}
}
