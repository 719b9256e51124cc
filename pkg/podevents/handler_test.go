package podevents

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func pod(uid, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID(uid), ResourceVersion: rv}}
}

// case C34: an update across UIDs is remove(old) then upsert(new); a same-UID update, an add
// and a delete (tombstones included) pass through as they are.
func TestC34HandlerSplitsUIDChange(t *testing.T) {
	var got []string
	h := Handler(
		func(p *corev1.Pod) { got = append(got, "upsert "+string(p.UID)+"@"+p.ResourceVersion) },
		func(o any) {
			switch x := o.(type) {
			case *corev1.Pod:
				got = append(got, "remove "+string(x.UID)+"@"+x.ResourceVersion)
			case cache.DeletedFinalStateUnknown:
				got = append(got, "remove tombstone "+x.Key)
			}
		})
	h.OnAdd(pod("u1", "1"), false)
	h.OnUpdate(pod("u1", "1"), pod("u1", "2"))
	h.OnUpdate(pod("u1", "2"), pod("u2", "7"))
	h.OnUpdate(pod("u2", "7"), "not a pod")
	h.OnAdd("not a pod", false)
	h.OnDelete(pod("u2", "8"))
	h.OnDelete(cache.DeletedFinalStateUnknown{Key: "ns/p"})
	want := []string{"upsert u1@1", "upsert u1@2", "remove u1@2", "upsert u2@7", "remove u2@8", "remove tombstone ns/p"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("calls\n%q\nwant\n%q", got, want)
	}
}
