package main

import (
	"strings"
	"testing"

	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/hami-go/hami-go/pkg/schedplugin"
)

// TestPluginRegistered: the registry the command's option builds holds HamiGo, and registering it
// again is refused (the option is what newCommand passes).
func TestPluginRegistered(t *testing.T) {
	r := runtime.Registry{}
	if err := app.WithPlugin(schedplugin.Name, schedplugin.New)(r); err != nil {
		t.Fatal(err)
	}
	if r[schedplugin.Name] == nil {
		t.Fatalf("registry %v has no %s", r, schedplugin.Name)
	}
	if err := app.WithPlugin(schedplugin.Name, schedplugin.New)(r); err == nil {
		t.Fatal("a second registration was accepted")
	}
}

// TestCommand: the command is kube-scheduler's, with its flags.
func TestCommand(t *testing.T) {
	cmd := newCommand()
	if cmd.Use != "kube-scheduler" || cmd.Flags().Lookup("config") == nil || !strings.Contains(cmd.Long, "scheduler") {
		t.Fatalf("command %q: not kube-scheduler's (no --config flag)", cmd.Use)
	}
}
