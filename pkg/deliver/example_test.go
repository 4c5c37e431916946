package deliver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/seqctl/seqctl/pkg/deliver"
	"github.com/seqctl/seqctl/pkg/engine"
)

// A receiver verifies each request over its raw body before handling it. A captured
// request replayed with a higher generation is refused.
func ExampleVerify() {
	key := []byte("a random key of 32 bytes or more")
	var captured *http.Request
	var capturedBody []byte
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := deliver.Verify(r, body, key); err != nil {
			fmt.Println("refused:", err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Println("accepted generation", r.Header.Get(deliver.HeaderGeneration))
		if captured == nil {
			captured, capturedBody = r.Clone(context.Background()), body
		}
	}))
	defer receiver.Close()

	send, _ := deliver.HTTP(deliver.HTTPConfig{URL: receiver.URL + "/orders", Keys: [][]byte{key}})
	ctx := engine.WithDelivery(context.Background(), engine.Delivery{
		Handler: "OrderProjector", Category: "order", Key: "client-7", Stream: "order:client-7", Generation: 7, Attempt: 1})
	_ = send(ctx, engine.Event{ID: "e-1", Type: "OrderPlaced", Category: "order", Key: "client-7", Data: []byte(`{"order_id":"o-1"}`)})

	// Replay the captured request with a higher generation.
	replay, _ := http.NewRequest(http.MethodPost, receiver.URL+captured.URL.RequestURI(), bytes.NewReader(capturedBody))
	replay.Header = captured.Header.Clone()
	replay.Header.Set(deliver.HeaderGeneration, "8")
	resp, err := http.DefaultClient.Do(replay)
	if err == nil {
		resp.Body.Close()
	}
	// Output:
	// accepted generation 7
	// refused: deliver: the signature does not match (wrong key, or the method, path, an X-Seq-* header or the body changed)
}
