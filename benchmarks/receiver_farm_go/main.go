// The receiver farm of the end-to-end benchmark, in Go: the same farm as
// benchmarks/receiver_farm.py (its Farm class is the reference), served by net/http.
//
//	receiver-farm -port 8801 -config farm.json [-verify-every 1]
//
// Why a Go farm: the receivers share the benchmark's two cores with the pipeline they
// measure, and every CPU-millisecond they spend is one the pipeline does not get. A
// real deployment's receivers run elsewhere. This farm does what the Python one does —
// counts every request by webhook-id, verifies Standard Webhooks signatures (HMAC-SHA256
// over "id.timestamp.body", 5-minute tolerance), plays the ok / slow / fail / throttle /
// hang / gone behaviours and serves /count, /stats and /arrivals in the same JSON — for
// a fraction of the CPU (benchmarks/pipeline.py --receiver-server; BENCHMARKS.md, Receiver farm).
//
// Standard library only, Go 1.19 or later (Debian 12's golang-go): `go build` needs
// nothing from the network.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	secretPrefix     = "whsec_"
	signatureVersion = "v1"
	toleranceS       = 300
	hooks            = "/hooks/"
)

var status = map[string]int{"ok": 200, "slow": 200, "fail": 500, "throttle": 429, "hang": 200, "gone": 410}

type endpointConfig struct {
	Secret      string   `json:"secret"`
	Kind        string   `json:"kind"`
	DelayS      *float64 `json:"delay_s"`
	RetryAfterS *float64 `json:"retry_after_s"`
}

type endpoint struct {
	endpointConfig
	key    []byte
	answer answer // what a verified request to it gets
}

type config struct {
	Endpoints map[string]endpointConfig `json:"endpoints"`
}

// farm holds the counts; one mutex, held for a few map updates per request.
type farm struct {
	endpoints   map[string]*endpoint
	verifyEvery int

	mu           sync.Mutex
	requests     int
	verified     int
	byID         map[string]int
	firstAt      map[string]float64
	series       map[int64]map[string]int
	badSignature [][2]string
	badCount     int
	inFlight     map[string]int
	maxInFlight  map[string]int
	reports      map[string]func() any
}

func newFarm(cfg config, verifyEvery int) (*farm, error) {
	f := &farm{
		endpoints: map[string]*endpoint{}, verifyEvery: verifyEvery,
		byID: map[string]int{}, firstAt: map[string]float64{},
		series: map[int64]map[string]int{}, inFlight: map[string]int{},
		maxInFlight: map[string]int{},
	}
	f.reports = map[string]func() any{"/count": f.count, "/stats": f.stats, "/arrivals": f.arrivals}
	for name, ec := range cfg.Endpoints {
		if _, known := status[ec.Kind]; !known {
			return nil, fmt.Errorf("endpoint %q: unknown kind %q", name, ec.Kind)
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(ec.Secret, secretPrefix))
		if err != nil || len(key) == 0 {
			return nil, fmt.Errorf("endpoint %q: secret is not base64 after %q", name, secretPrefix)
		}
		a := answer{status: status[ec.Kind]}
		switch ec.Kind {
		case "throttle":
			retry := 2.0
			if ec.RetryAfterS != nil {
				retry = *ec.RetryAfterS
			}
			a.retryAfter = strconv.FormatFloat(retry, 'f', -1, 64)
		case "slow":
			delay := 28.0
			if ec.DelayS != nil {
				delay = *ec.DelayS
			}
			a.wait, a.delay = "slow", time.Duration(delay*float64(time.Second))
		case "hang":
			a.wait = "hang"
		}
		f.endpoints[name] = &endpoint{ec, key, a}
	}
	return f, nil
}

// verify checks a webhook as hookstream.core.signing.verify does; "" means it passed.
func verify(key []byte, h http.Header, body []byte, now int64) string {
	id, rawTS, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" {
		return "missing webhook-id header"
	}
	if rawTS == "" {
		return "missing webhook-timestamp header"
	}
	if sigs == "" {
		return "missing webhook-signature header"
	}
	if len(rawTS) > 20 || strings.Trim(rawTS, "0123456789") != "" {
		return "invalid webhook-timestamp header"
	}
	ts, err := strconv.ParseInt(rawTS, 10, 64)
	if err != nil {
		return "invalid webhook-timestamp header"
	}
	if now-ts > toleranceS {
		return "timestamp too old"
	}
	if ts-now > toleranceS {
		return "timestamp too new"
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + rawTS + "."))
	mac.Write(body)
	expected := []byte(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	for _, candidate := range strings.Split(sigs, " ") {
		version, value, ok := strings.Cut(candidate, ",")
		if ok && version == signatureVersion && hmac.Equal(expected, []byte(value)) {
			return ""
		}
	}
	return "no matching signature"
}

// answer is what the farm does with one webhook (Farm.receive's Answer).
type answer struct {
	status     int
	retryAfter string
	name       string // set when the request counts towards in-flight
	wait       string // "slow" or "hang"
	delay      time.Duration
}

func (f *farm) receive(name string, h http.Header, body []byte) answer {
	nowT := time.Now()
	now := float64(nowT.UnixNano()) / 1e9
	ep := f.endpoints[name]
	kind := "unknown"
	if ep != nil {
		kind = ep.Kind
	}
	webhookID := h.Get("webhook-id")
	f.mu.Lock()
	f.requests++
	check := ep != nil && f.requests%f.verifyEvery == 0
	if ep != nil {
		f.byID[webhookID]++
		if _, seen := f.firstAt[webhookID]; !seen {
			f.firstAt[webhookID] = now
		}
	}
	sec := nowT.Unix()
	if f.series[sec] == nil {
		f.series[sec] = map[string]int{}
	}
	f.series[sec][kind]++
	f.mu.Unlock()
	if ep == nil {
		return answer{status: 200} // the yardstick client's path
	}
	// The HMAC outside the lock: requests verify in parallel.
	reason := ""
	if check {
		reason = verify(ep.key, h, body, nowT.Unix())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if reason != "" {
		f.badCount++
		if len(f.badSignature) < 100 {
			f.badSignature = append(f.badSignature, [2]string{webhookID, reason})
		}
		return answer{status: 401}
	}
	if check {
		f.verified++
	}
	f.inFlight[name]++
	if f.inFlight[name] > f.maxInFlight[name] {
		f.maxInFlight[name] = f.inFlight[name]
	}
	a := ep.answer // the endpoint's behaviour, worked out once from its config
	a.name = name
	return a
}

func (f *farm) finished(a answer) {
	if a.name != "" {
		f.mu.Lock()
		f.inFlight[a.name]--
		f.mu.Unlock()
	}
}

func (f *farm) count() any {
	f.mu.Lock()
	defer f.mu.Unlock()
	recent := map[string]int{}
	now := time.Now().Unix()
	for sec := now - 5; sec < now; sec++ {
		for kind, n := range f.series[sec] {
			recent[kind] += n
		}
	}
	return map[string]any{"requests": f.requests, "distinct": len(f.byID),
		"verified": f.verified, "bad_signature": f.badCount, "last_5s": recent}
}

func (f *farm) stats() any {
	f.mu.Lock()
	defer f.mu.Unlock()
	series := make(map[string]map[string]int, len(f.series))
	for sec, kinds := range f.series {
		series[strconv.FormatInt(sec, 10)] = kinds
	}
	sample := f.badSignature
	if len(sample) > 10 {
		sample = sample[:10]
	}
	return map[string]any{
		"requests": f.requests, "verified": f.verified, "verify_every": f.verifyEvery,
		"bad_signature": f.badCount, "bad_signature_sample": sample,
		"by_id": f.byID, "series": series,
		"max_in_flight": f.maxInFlight, "in_flight": f.inFlight,
	}
}

func (f *farm) arrivals() any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.firstAt
}

func (f *farm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if report, ok := f.reports[r.URL.Path]; ok && r.Method == http.MethodGet {
		// Marshalled under the farm's lock (the maps are live), written after it.
		body, err := json.Marshal(report())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, hooks)
	if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, hooks) || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the sender hung up mid-body: nothing arrived
	}
	a := f.receive(name, r.Header, body)
	defer f.finished(a)
	switch a.wait {
	case "slow":
		// At most until the sender hangs up, as the Python farm does.
		timer := time.NewTimer(a.delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.Context().Done():
			return
		}
	case "hang":
		// Once the body is read, net/http cancels the request's context when the client
		// closes the connection: a hang lasts until then.
		<-r.Context().Done()
		return
	}
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(a.status)
}

func main() {
	port := flag.Int("port", 0, "loopback port to listen on")
	configPath := flag.String("config", "", "farm.json: endpoint name → secret and behaviour")
	verifyEvery := flag.Int("verify-every", 1, "verify the signature of every Nth request")
	flag.Parse()
	if os.Getenv("GOMAXPROCS") == "" {
		// One P: with two, the scheduler's idle Ps spin looking for work on a machine
		// whose other core is the system under test (0.15 → 0.10 CPU-ms per delivery
		// for the two farm processes at 1,000/s, 2026-12-07).
		runtime.GOMAXPROCS(1)
	}
	if *port == 0 || *configPath == "" {
		log.Fatal("-port and -config are required")
	}
	raw, err := os.ReadFile(*configPath)
	if err != nil {
		log.Fatal(err)
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		log.Fatalf("%s: %v", *configPath, err)
	}
	if *verifyEvery < 1 {
		*verifyEvery = 1
	}
	f, err := newFarm(cfg, *verifyEvery)
	if err != nil {
		log.Fatal(err)
	}
	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		log.Fatal(err)
	}
	server := &http.Server{Handler: f, IdleTimeout: 75 * time.Second,
		ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-stop
		// A hanging request never ends by itself: give the rest 2 s, then go.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		server.Shutdown(ctx)
		server.Close()
	}()
	if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
	<-stopped
}
