package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"

	"go.podman.io/image/v5/types"
)

// getBlobFrom returns info's bytes from offset to the end, with a ranged
// GET through src's own (authenticated, mirror-aware) client.
//
// containers/image's docker source has that as GetBlobAt (for chunked
// pulls), whose chunk list is of an internal type (private.
// ImageSourceChunk{Offset, Length uint64}) podbay cannot name: it is
// called through reflection here, and TestGetBlobAtShape fails if its
// form changes. What it does with the answer: a 206 is passed on as it
// comes (its Content-Range unread: the caller checks the bytes against
// what it holds, see resumeBody.checkOverlap), a 200 (a registry without
// ranges) is read and skipped up to offset, anything else is an error.
func getBlobFrom(ctx context.Context, src types.ImageSource, info types.BlobInfo, offset int64) (io.ReadCloser, error) {
	method, chunkType, err := getBlobAtMethod(src)
	if err != nil {
		return nil, &rangeError{offset: offset, reason: err.Error()}
	}
	ctx, cancel := context.WithCancel(ctx)
	chunks := reflect.MakeSlice(reflect.SliceOf(chunkType), 1, 1)
	chunks.Index(0).FieldByName("Offset").SetUint(uint64(offset))
	chunks.Index(0).FieldByName("Length").SetUint(math.MaxUint64)
	out := method.Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(info), chunks})
	if e, _ := out[2].Interface().(error); e != nil {
		cancel()
		return nil, e
	}
	streams, _ := out[0].Interface().(chan io.ReadCloser)
	errs, _ := out[1].Interface().(chan error)
	r := &chunkReader{cancel: cancel, streams: streams, errs: errs}
	for r.streams != nil || r.errs != nil {
		select {
		case s, ok := <-r.streams:
			if !ok {
				r.streams = nil
				continue
			}
			r.ReadCloser = s
			return r, nil
		case e, ok := <-r.errs:
			if !ok {
				r.errs = nil
				continue
			}
			if e != nil {
				_ = r.Close()
				return nil, e
			}
		}
	}
	cancel()
	return nil, errors.New("the registry's answer to a range request had no data")
}

// getBlobAtMethod finds src's GetBlobAt and checks its form:
// (context.Context, types.BlobInfo, []struct{Offset, Length uint64})
// (chan io.ReadCloser, chan error, error).
func getBlobAtMethod(src types.ImageSource) (reflect.Value, reflect.Type, error) {
	m := reflect.ValueOf(src).MethodByName("GetBlobAt")
	if !m.IsValid() {
		return reflect.Value{}, nil, fmt.Errorf("the image source %T has no GetBlobAt", src)
	}
	t := m.Type()
	shapeErr := fmt.Errorf("the image source %T's GetBlobAt is %s, not the form podbay knows", src, t)
	if t.NumIn() != 3 || t.NumOut() != 3 ||
		t.In(0) != reflect.TypeFor[context.Context]() || t.In(1) != reflect.TypeFor[types.BlobInfo]() ||
		t.In(2).Kind() != reflect.Slice ||
		t.Out(0) != reflect.TypeFor[chan io.ReadCloser]() || t.Out(1) != reflect.TypeFor[chan error]() ||
		t.Out(2) != reflect.TypeFor[error]() {
		return reflect.Value{}, nil, shapeErr
	}
	chunk := t.In(2).Elem()
	if chunk.Kind() != reflect.Struct || chunk.NumField() != 2 {
		return reflect.Value{}, nil, shapeErr
	}
	for _, name := range []string{"Offset", "Length"} {
		if f, ok := chunk.FieldByName(name); !ok || f.Type.Kind() != reflect.Uint64 || !f.IsExported() {
			return reflect.Value{}, nil, shapeErr
		}
	}
	return m, chunk, nil
}

// chunkReader is GetBlobAt's one stream. Close ends the request and
// drains GetBlobAt's channels, so that its goroutine ends.
type chunkReader struct {
	io.ReadCloser
	cancel  context.CancelFunc
	streams chan io.ReadCloser
	errs    chan error
}

func (r *chunkReader) Close() error {
	r.cancel()
	var err error
	if r.ReadCloser != nil {
		err = r.ReadCloser.Close()
	}
	streams, errs := r.streams, r.errs
	go func() {
		for streams != nil || errs != nil {
			select {
			case s, ok := <-streams:
				if !ok {
					streams = nil
				} else {
					_ = s.Close()
				}
			case _, ok := <-errs:
				if !ok {
					errs = nil
				}
			}
		}
	}()
	return err
}
