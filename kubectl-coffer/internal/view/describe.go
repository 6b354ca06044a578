package view

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Description is what `kubectl coffer describe` shows of a BackupJob or RestoreJob.
type Description struct {
	Kind, Namespace, Name string
	State                 State
	Created               metav1.Time
	Started, Completed    *metav1.Time
	// Fields are the kind's own lines, in order (Plan, Application, Class, Backup, ...).
	Fields []Field
	// Conditions are the run's conditions.
	Conditions []metav1.Condition
	// Events are the Kubernetes Events about the run.
	Events []Event
	// Driver are the objects the driver made for the run (a Velero Backup or Restore, a Job).
	Driver []DriverObject
	// Notes say what could not be shown, and why.
	Notes []string
}

// Field is one "Name: value" line.
type Field struct{ Name, Value string }

// Event is a Kubernetes Event about the run.
type Event struct {
	Type, Reason, From, Message string
	// Count is how often it happened; Last is when it last did.
	Count int32
	Last  time.Time
}

// DriverObject is an object a driver made for the run, with what it says of its progress.
type DriverObject struct {
	// Kind is the object's kind with its group ("velero.io Backup", "batch/v1 Job", "Pod").
	Kind, Namespace, Name string
	// Status is its phase or state.
	Status string
	// Log is the tail of a pod's log; Indent nests the object under the one before it.
	Log    string
	Indent bool
}

// WriteDescribe prints d, times relative to now.
func WriteDescribe(w io.Writer, d *Description, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(name, value string) { fmt.Fprintf(tw, "%s:\t%s\n", name, value) }
	line("Name", d.Namespace+"/"+d.Name)
	line("Kind", d.Kind)
	phase := d.State.Phase
	if phase == "" {
		phase = "Pending"
	}
	line("Phase", phase)
	if d.State.Reason != "" {
		line("Reason", d.State.Reason)
	}
	if d.State.Message != "" {
		line("Message", oneLine(d.State.Message))
	}
	line("Created", stamp(now, &d.Created))
	if d.Started != nil {
		line("Started", stamp(now, d.Started))
	}
	if d.Completed != nil {
		took := ""
		if d.Started != nil {
			took = ", took " + duration.HumanDuration(d.Completed.Sub(d.Started.Time))
		}
		line("Completed", stamp(now, d.Completed)+took)
	}
	for _, f := range d.Fields {
		line(f.Name, f.Value)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w, "Conditions:")
	if len(d.Conditions) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tAGE\tMESSAGE")
		for _, c := range d.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age(now, c.LastTransitionTime.Time), oneLine(c.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "Events:")
	if len(d.Events) == 0 {
		fmt.Fprintln(w, "  <none>")
	} else {
		events := append([]Event(nil), d.Events...)
		sort.SliceStable(events, func(i, k int) bool { return events[i].Last.Before(events[k].Last) })
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  AGE\tTYPE\tREASON\tFROM\tMESSAGE")
		for _, e := range events {
			a := age(now, e.Last)
			if e.Count > 1 {
				a += fmt.Sprintf(" (x%d)", e.Count)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", a, e.Type, e.Reason, e.From, oneLine(e.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if len(d.Driver) > 0 {
		fmt.Fprintln(w, "Driver objects:")
		for _, o := range d.Driver {
			indent := "  "
			if o.Indent {
				indent = "    "
			}
			name := o.Name
			if o.Namespace != "" {
				name = o.Namespace + "/" + o.Name
			}
			status := o.Status
			if status == "" {
				status = "(no status yet)"
			}
			fmt.Fprintf(w, "%s%s %s: %s\n", indent, o.Kind, name, status)
			if o.Log != "" {
				for _, l := range strings.Split(strings.TrimRight(o.Log, "\n"), "\n") {
					fmt.Fprintf(w, "%s  | %s\n", indent, l)
				}
			}
		}
	}
	for _, n := range d.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
	return nil
}

// stamp is a time as RFC 3339 with its age: "2026-04-29T02:00:04Z (5m ago)".
func stamp(now time.Time, t *metav1.Time) string {
	return t.UTC().Format(time.RFC3339) + " (" + Ago(now, t) + ")"
}

// age is how long ago t was, as kubectl prints ages ("<unknown>" when unset).
func age(now, t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}
