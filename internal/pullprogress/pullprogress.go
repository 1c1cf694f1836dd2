// Package pullprogress holds the messages of podbayd's pull progress
// service (podbay.v1.Pulls/List on the CRI socket): every image pull in
// flight, per layer, and the ones finished lately. The CRI has no RPC for
// it (KEP-5334 asked for one and stalled); the types are shaped as such an
// RPC's messages would be (docs/design.md, *Pull progress*), so that they
// could back one. They travel as JSON in a google.protobuf.StringValue.
package pullprogress

import "time"

// The service: request google.protobuf.Empty, response
// google.protobuf.StringValue holding a Snapshot as JSON.
const (
	ServiceName = "podbay.v1.Pulls"
	ListMethod  = "/" + ServiceName + "/List"
)

// Layer states (Layer.State), in the order a layer goes through
// them in a one-pass pull.
const (
	LayerWaiting    = "waiting"    // not begun: waiting for a download slot
	LayerFetching   = "fetching"   // downloading, decompressed and unpacked as it arrives
	LayerUnpacking  = "unpacking"  // every compressed byte read; unpacking and verifying the rest
	LayerStaged     = "staged"     // unpacked and verified, waiting for the layers below it to be committed
	LayerCommitting = "committing" // being moved into storage
	LayerDone       = "done"       // in storage
	LayerExists     = "exists"     // was in storage already: nothing fetched
	LayerFailed     = "failed"     // its download or unpacking failed (or the pull was cancelled)
)

// Pull states (Pull.State).
const (
	PullRunning = "pulling"
	PullDone    = "done"
	PullFailed  = "failed"
)

// Pull engines (Pull.Engine).
const (
	EngineOnePass = "one-pass"
	EngineCopy    = "copy" // containers/image's copy.Image
)

// Snapshot is every pull in flight and the ones finished lately.
type Snapshot struct {
	// Time is the moment the figures were read, for rates and ETAs.
	Time time.Time `json:"time"`
	// Pulls are the pulls in flight, oldest first, then the finished
	// ones, newest first.
	Pulls []Pull `json:"pulls"`
	// OmittedInFlight counts pulls in flight left out (beyond the
	// daemon's bound, 16): the newest.
	OmittedInFlight int `json:"omitted_in_flight,omitempty"`
}

// Pull is one image pull's progress: what an ImageService RPC
// reporting it would return per pull. Sizes are bytes; Size, Fetched and
// Unpacked sum the layers'.
type Pull struct {
	// ImageRef is the reference as asked for; Candidate the fully
	// qualified name being (or last) tried.
	ImageRef  string `json:"image_ref"`
	Candidate string `json:"candidate,omitempty"`
	// Engine is EngineOnePass or EngineCopy; empty before the manifest.
	Engine     string    `json:"engine,omitempty"`
	State      string    `json:"state"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Size is the compressed size of the layers to fetch (those of the
	// manifest not in storage already); -1 while one's is unknown.
	Size     int64 `json:"size"`
	Fetched  int64 `json:"fetched"`
	Unpacked int64 `json:"unpacked"`
	// LayersDone counts layers done or already present.
	LayersDone         int   `json:"layers_done"`
	RateBytesPerSecond int64 `json:"rate_bytes_per_second"`
	// StalledSince is set while every layer downloading received nothing
	// for 5 s (and nothing is unpacked or committed meanwhile): the
	// moment of the last byte.
	StalledSince time.Time `json:"stalled_since,omitzero"`
	Layers       []Layer   `json:"layers"`
}

// Layer is one layer's progress in a pull.
type Layer struct {
	Digest    string `json:"digest"`
	MediaType string `json:"media_type,omitempty"`
	// Size is the compressed size from the manifest; -1 when unknown.
	Size int64 `json:"size"`
	// Fetched counts compressed bytes received, Unpacked the
	// decompressed bytes handed to the unpacker (copy.Image unpacks at
	// the image's commit and reports none). A retried download's figures
	// hold until the retry passes them: they never go back.
	Fetched            int64     `json:"fetched"`
	Unpacked           int64     `json:"unpacked"`
	State              string    `json:"state"`
	RateBytesPerSecond int64     `json:"rate_bytes_per_second"`
	StalledSince       time.Time `json:"stalled_since,omitzero"`
	StartedAt          time.Time `json:"started_at,omitzero"`
	FinishedAt         time.Time `json:"finished_at,omitzero"`
}
