package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/soapgw/soapgw/internal/config"
	"github.com/soapgw/soapgw/internal/envelope"
	"github.com/soapgw/soapgw/internal/httpwire"
	"github.com/soapgw/soapgw/internal/ledger"
	"github.com/soapgw/soapgw/internal/proxy"
	"github.com/soapgw/soapgw/internal/spool"
)

// spoolOptions are the flags of `soapgw spool` and its subcommands.
type spoolOptions struct {
	file   string // the spool (or, for `spool ledger`, the ledger) file
	config string // or a configuration naming it (edge.one_way.spool, origin.one_way.ledger)
	json   bool
	limit  int
	show   string // dead --show SEQ
	all    bool   // purge --all
	dir    string // export --dir
	now    func() time.Time
}

// newSpoolCommand inspects and repairs the edge's one-way spool (internal/spool) and the
// origin's ledger (internal/ledger) while their gateway is stopped.
func newSpoolCommand(g *globalOptions) *cobra.Command {
	o := &spoolOptions{now: time.Now}
	cmd := &cobra.Command{
		Use:   "spool",
		Short: "Inspect and repair the edge's one-way spool (and the origin's ledger)",
		Long: `spool works on the files of one-way messaging (docs/operations.md, "One-way
messages"): the edge's spool (edge.one_way.spool), which holds the messages the edge
acknowledged to its clients until the origin delivered them, and the dead letters (messages
the server refused, and those whose delivery is in doubt); and, with 'spool ledger', the
origin's ledger of delivered message ids (origin.one_way.ledger).

Name the file with --file, or give the gateway's configuration with --config (the path is
read from it, ${VAR}s expanded as 'soapgw run' does). A running gateway holds its file
locked: the commands then fail after a second. Watch a running edge through its metrics
(soapgw_oneway_*) instead, and stop it to change its spool.

Output is aligned text, or JSON with --json.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().BoolVar(&o.json, "json", false, "print JSON instead of aligned text")

	stats := &cobra.Command{
		Use:   "stats",
		Short: "Pending messages, their bytes, the oldest one's age, dead letters",
		Args:  exactArgs(0),
		RunE: func(_ *cobra.Command, _ []string) error {
			return o.withSpool(func(sp *spool.Spool, path string) error { return o.stats(g.stdout, sp, path) })
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the pending messages, oldest first",
		Args:  exactArgs(0),
		RunE: func(_ *cobra.Command, _ []string) error {
			return o.withSpool(func(sp *spool.Spool, _ string) error { return o.list(g.stdout, g.stderr, sp) })
		},
	}
	list.Flags().IntVar(&o.limit, "limit", 100, "list at most this many (0: all)")
	dead := &cobra.Command{
		Use:   "dead [--show SEQ]",
		Short: "List the dead letters, or show one: the request and the server's answer",
		Long: `dead lists the dead letters: messages the server refused (it answered a SOAP Fault or
an error status; never sent again) and messages whose delivery is in doubt (the server got
them whole but its answer was lost: the origin does not send them again unless
origin.one_way.in_doubt is redeliver). --show SEQ prints one of them: the request as the
edge received it (hop-by-hop fields removed) and the server's answer as the origin relayed
it (up to 64 KiB of its body). After looking, 'requeue' sends one again under a new id,
'purge' deletes it.`,
		Args: exactArgs(0),
		RunE: func(_ *cobra.Command, _ []string) error {
			return o.withSpool(func(sp *spool.Spool, _ string) error {
				if o.show != "" {
					seq, err := parseSeq(o.show)
					if err != nil {
						return usageError{fmt.Errorf("--show: %w", err)}
					}
					return o.showDead(g.stdout, sp, seq)
				}
				return o.dead(g.stdout, g.stderr, sp)
			})
		},
	}
	dead.Flags().IntVar(&o.limit, "limit", 100, "list at most this many (0: all)")
	dead.Flags().StringVar(&o.show, "show", "", "print dead letter SEQ: its request and the server's answer")
	requeue := &cobra.Command{
		Use:   "requeue SEQ...",
		Short: "Move dead letters back to the pending messages, under new message ids",
		Long: `requeue moves each dead letter SEQ back to the pending messages under a new seq and
so a new message id: the origin's ledger, which holds the old id as delivered or in doubt,
does not refuse it, and the edge delivers it the next time it runs. Only for a message an
operator has decided must reach the server (again): for one in doubt, check first that the
server did not run it.`,
		Args: seqArgs(false),
		RunE: func(_ *cobra.Command, args []string) error {
			return o.withSpool(func(sp *spool.Spool, _ string) error { return o.requeue(g.stdout, sp, args) })
		},
	}
	purge := &cobra.Command{
		Use:   "purge SEQ... | purge --all",
		Short: "Delete dead letters",
		Args:  seqArgs(true),
		RunE: func(_ *cobra.Command, args []string) error {
			if o.all == (len(args) > 0) {
				return usageError{errors.New("give the dead letters' SEQs or --all, not both")}
			}
			return o.withSpool(func(sp *spool.Spool, _ string) error { return o.purge(g.stdout, sp, args) })
		},
	}
	purge.Flags().BoolVar(&o.all, "all", false, "delete every dead letter")
	drop := &cobra.Command{
		Use:   "drop SEQ...",
		Short: "Delete pending messages (export them first)",
		Long: `drop deletes pending messages SEQ: they are never delivered. For messages that can never
be delivered (their peer or upstream was removed from the configuration) or an edge
being decommissioned: export them first ('spool export') so nothing acknowledged is lost
without a trace.`,
		Args: seqArgs(false),
		RunE: func(_ *cobra.Command, args []string) error {
			return o.withSpool(func(sp *spool.Spool, _ string) error { return o.drop(g.stdout, sp, args) })
		},
	}
	export := &cobra.Command{
		Use:   "export --dir DIR",
		Short: "Write every pending message to DIR as an HTTP request file (to decommission an edge)",
		Long: `export writes each pending message to DIR/SEQ.http: the HTTP request as the edge
received it from its client (hop-by-hop fields removed, with its Content-Length), which the
origin would have sent to the server; and DIR/messages.json, one entry per message (seq,
message id, peer, upstream, accepted, size, file). It leaves the spool as it is: to retire
an edge whose messages cannot be delivered from it any more, stop it, export, deliver the
files another way, and check each message id in the origin's ledger first ('spool ledger':
an id it holds as done was delivered). Files are created with mode 0600, never overwritten.`,
		Args: exactArgs(0),
		RunE: func(_ *cobra.Command, _ []string) error {
			if o.dir == "" {
				return usageError{errors.New("--dir DIR is required")}
			}
			return o.withSpool(func(sp *spool.Spool, _ string) error { return o.export(g.stdout, sp) })
		},
	}
	export.Flags().StringVar(&o.dir, "dir", "", "directory to write the messages to (created if missing)")
	for _, c := range []*cobra.Command{stats, list, dead, requeue, purge, export, drop} {
		c.Flags().StringVar(&o.file, "file", "", "the spool file (edge.one_way.spool)")
		c.Flags().StringVar(&o.config, "config", "", "read the spool file's path from this edge configuration")
		cmd.AddCommand(c)
	}
	cmd.AddCommand(newSpoolLedgerCommand(g, o))
	return cmd
}

// newSpoolLedgerCommand reads the origin's ledger.
func newSpoolLedgerCommand(g *globalOptions, o *spoolOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ledger [in-doubt]",
		Short: "The origin's ledger of one-way message ids: counts by state, or the ids in doubt",
		Long: `ledger prints how many message ids the origin's ledger (origin.one_way.ledger)
holds in each state: done (delivered to the server: a copy sent again is refused as
already_delivered), in doubt (the server got the whole request, its answer never came
back: not sent again unless origin.one_way.in_doubt is redeliver), sending (the server
never got it whole: delivered when the edge sends it again; only ledgers written by
earlier versions hold these, a claim is no longer written). 'ledger in-doubt' lists the
ids in doubt, oldest first, with the time their last byte went: find those messages at the
server (the id is the X-Soapgw-Message-Id the client got) before requeueing the edge's dead
letter. Stop the origin first: it holds the file locked.`,
		Args: exactArgs(0),
		RunE: func(_ *cobra.Command, _ []string) error {
			return o.withLedger(func(l *ledger.Ledger, path string) error { return o.ledgerStats(g.stdout, l, path) })
		},
	}
	inDoubt := &cobra.Command{
		Use:   "in-doubt",
		Short: "List the message ids in doubt, oldest first",
		Args:  exactArgs(0),
		RunE: func(_ *cobra.Command, _ []string) error {
			return o.withLedger(func(l *ledger.Ledger, _ string) error { return o.ledgerInDoubt(g.stdout, g.stderr, l) })
		},
	}
	inDoubt.Flags().IntVar(&o.limit, "limit", 100, "list at most this many (0: all)")
	get := &cobra.Command{
		Use:   "get ID...",
		Short: "What the ledger holds for message ids (ow.<spool id>-<seq>): done, in doubt, sending, or absent",
		Long: `get prints what the ledger holds for each message id: done (delivered; with the time
and the server's status), in_doubt (the server got it whole, no answer came back), sending
(never sent whole) or absent (never delivered by this origin, or forgotten after
origin.one_way.retention). Use it on the ids of messages exported from an edge's spool
('spool export', messages.json) to tell which ones the server already has.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("give at least one message id (ow.<spool id>-<seq>)")}
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			return o.withLedger(func(l *ledger.Ledger, _ string) error { return o.ledgerGet(g.stdout, l, args) })
		},
	}
	cmd.PersistentFlags().StringVar(&o.file, "file", "", "the ledger file (origin.one_way.ledger)")
	cmd.PersistentFlags().StringVar(&o.config, "config", "", "read the ledger file's path from this origin configuration")
	cmd.AddCommand(inDoubt, get)
	return cmd
}

// seqArgs accepts SEQ arguments (at least one unless optional) and checks they parse.
func seqArgs(optional bool) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 && !optional {
			return usageError{errors.New("give at least one SEQ (as 'spool dead' lists them)")}
		}
		for _, a := range args {
			if _, err := parseSeq(a); err != nil {
				return usageError{err}
			}
		}
		return nil
	}
}

func parseSeq(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a message seq (a positive number, as 'spool list' and 'spool dead' show)", s)
	}
	return n, nil
}

// path resolves the file from --file or --config.
func (o *spoolOptions) path(what string, fromConfig func(*config.Config) string) (string, error) {
	switch {
	case o.file != "" && o.config != "":
		return "", usageError{errors.New("give --file or --config, not both")}
	case o.file != "":
		return o.file, nil
	case o.config != "":
		cfg, err := config.Load(o.config)
		if err != nil {
			return "", usageError{err}
		}
		p := fromConfig(cfg)
		if p == "" {
			return "", usageError{fmt.Errorf("%s configures no %s", o.config, what)}
		}
		return p, nil
	}
	return "", usageError{fmt.Errorf("--file FILE or --config FILE is required (the %s)", what)}
}

// mustExist refuses a missing file: opening it would create an empty store.
func mustExist(path, what string) error {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return usageError{fmt.Errorf("%s %s does not exist", what, path)}
		}
		return err
	}
	return nil
}

func (o *spoolOptions) withSpool(fn func(sp *spool.Spool, path string) error) error {
	path, err := o.path("edge.one_way.spool", func(c *config.Config) string {
		if c.Edge == nil || c.Edge.OneWay == nil {
			return ""
		}
		return c.Edge.OneWay.Spool
	})
	if err != nil {
		return err
	}
	if err := mustExist(path, "spool file"); err != nil {
		return err
	}
	sp, err := spool.Open(path, spool.Limits{})
	if errors.Is(err, spool.ErrLocked) {
		return fmt.Errorf("spool file %s is locked by a running edge (%w). A running edge's spool is watched through its metrics: soapgw_oneway_spool, soapgw_oneway_oldest_age_seconds, soapgw_oneway_deliveries_total on its admin listener's /metrics; stop the edge to inspect or change its spool", path, err)
	}
	if err != nil {
		return err
	}
	err = fn(sp, path)
	if cerr := sp.Close(); err == nil {
		err = cerr
	}
	return err
}

// ledgerRetention is the retention the command opens a ledger with: it must never prune
// what the origin keeps.
const ledgerRetention = 100 * 365 * 24 * time.Hour

func (o *spoolOptions) withLedger(fn func(l *ledger.Ledger, path string) error) error {
	path, err := o.path("origin.one_way.ledger", func(c *config.Config) string {
		if c.Origin == nil || c.Origin.OneWay == nil {
			return ""
		}
		return c.Origin.OneWay.Ledger
	})
	if err != nil {
		return err
	}
	if err := mustExist(path, "ledger file"); err != nil {
		return err
	}
	l, err := ledger.Open(path, ledgerRetention)
	if errors.Is(err, ledger.ErrLocked) {
		return fmt.Errorf("ledger file %s is locked by a running origin (%w). A running origin's one-way deliveries show in its metric soapgw_origin_oneway_total{result}; stop the origin to read its ledger", path, err)
	}
	if err != nil {
		return err
	}
	err = fn(l, path)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	return err
}

// timeText formats a time for the tables: UTC, milliseconds.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i])
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// truncated reports on stderr that a listing stopped at --limit.
func truncated(stderr io.Writer, shown, total int, what string) {
	if shown < total {
		fmt.Fprintf(stderr, "%d of %d %s shown (--limit 0 for all)\n", shown, total, what)
	}
}

type spoolStatsJSON struct {
	File             string     `json:"file"`
	SpoolID          string     `json:"spool_id"`
	Messages         int        `json:"messages"`
	Bytes            int64      `json:"bytes"`
	Oldest           *time.Time `json:"oldest"`
	OldestAgeSeconds float64    `json:"oldest_age_seconds"`
	DeadLetters      int        `json:"dead_letters"`
}

func (o *spoolOptions) stats(w io.Writer, sp *spool.Spool, path string) error {
	st := sp.Stats()
	age := 0.0
	if !st.Oldest.IsZero() {
		age = o.now().Sub(st.Oldest).Seconds()
	}
	if o.json {
		out := spoolStatsJSON{File: path, SpoolID: sp.ID(), Messages: st.Messages, Bytes: st.Bytes, OldestAgeSeconds: age, DeadLetters: st.Dead}
		if !st.Oldest.IsZero() {
			t := st.Oldest.UTC()
			out.Oldest = &t
		}
		return writeJSON(w, out)
	}
	tw := table(w)
	fmt.Fprintf(tw, "file\t%s\n", path)
	fmt.Fprintf(tw, "spool id\t%s\n", sp.ID())
	fmt.Fprintf(tw, "pending messages\t%d\n", st.Messages)
	fmt.Fprintf(tw, "pending bytes\t%d (%s)\n", st.Bytes, humanBytes(st.Bytes))
	if st.Oldest.IsZero() {
		fmt.Fprintf(tw, "oldest\t-\n")
	} else {
		fmt.Fprintf(tw, "oldest\t%s (%s ago)\n", timeText(st.Oldest), time.Duration(age*float64(time.Second)).Round(time.Second))
	}
	fmt.Fprintf(tw, "dead letters\t%d\n", st.Dead)
	return tw.Flush()
}

type messageJSON struct {
	Seq      uint64    `json:"seq"`
	ID       string    `json:"id"`
	Peer     string    `json:"peer"`
	Upstream string    `json:"upstream"`
	Accepted time.Time `json:"accepted"`
	Size     int       `json:"size"`
	Method   string    `json:"method,omitempty"`
	Target   string    `json:"target,omitempty"`
	Action   string    `json:"soap_action,omitempty"`
}

func messageInfo(m spool.Message) messageJSON {
	j := messageJSON{Seq: m.Seq, ID: m.ID, Peer: m.Peer, Upstream: m.Upstream, Accepted: m.Accepted.UTC(), Size: len(m.Data)}
	if req, _, err := splitMessage(m.Data); err == nil {
		j.Method, j.Target, j.Action = req.Method, req.Target, proxy.SOAPAction(req.Header)
	}
	return j
}

// splitMessage parses a spooled tunnel request message: its head and body.
func splitMessage(data []byte) (*envelope.Request, []byte, error) {
	head, body, err := envelope.Split(data)
	if err != nil {
		return nil, nil, err
	}
	req, err := envelope.ParseRequest(head)
	if err != nil {
		return nil, nil, err
	}
	return req, body, nil
}

func (o *spoolOptions) list(w, stderr io.Writer, sp *spool.Spool) error {
	var msgs []messageJSON
	total := 0
	err := sp.Pending(0, func(m spool.Message) bool {
		total++
		if o.limit <= 0 || len(msgs) < o.limit {
			msgs = append(msgs, messageInfo(m))
		}
		return true
	})
	if err != nil {
		return err
	}
	defer truncated(stderr, len(msgs), total, "pending messages")
	if o.json {
		if msgs == nil {
			msgs = []messageJSON{}
		}
		return writeJSON(w, msgs)
	}
	tw := table(w)
	fmt.Fprintln(tw, "SEQ\tID\tPEER\tUPSTREAM\tACCEPTED\tSIZE\tACTION")
	for _, m := range msgs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", m.Seq, m.ID, m.Peer, m.Upstream, timeText(m.Accepted), m.Size, orDash(m.Action))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type deadJSON struct {
	messageJSON
	Reason string `json:"reason"`
}

func (o *spoolOptions) dead(w, stderr io.Writer, sp *spool.Spool) error {
	var dead []deadJSON
	total := 0
	err := sp.DeadLetters(func(d spool.Dead) bool {
		total++
		if o.limit <= 0 || len(dead) < o.limit {
			dead = append(dead, deadJSON{messageJSON: messageInfo(d.Message), Reason: d.Reason})
		}
		return true
	})
	if err != nil {
		return err
	}
	defer truncated(stderr, len(dead), total, "dead letters")
	if o.json {
		if dead == nil {
			dead = []deadJSON{}
		}
		return writeJSON(w, dead)
	}
	tw := table(w)
	fmt.Fprintln(tw, "SEQ\tID\tACCEPTED\tREASON")
	for _, d := range dead {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", d.Seq, d.ID, timeText(d.Accepted), d.Reason)
	}
	return tw.Flush()
}

// findDead returns the dead letter seq.
func findDead(sp *spool.Spool, seq uint64) (spool.Dead, error) {
	var found *spool.Dead
	err := sp.DeadLetters(func(d spool.Dead) bool {
		if d.Seq == seq {
			found = &d
			return false
		}
		return d.Seq < seq
	})
	if err != nil {
		return spool.Dead{}, err
	}
	if found == nil {
		return spool.Dead{}, fmt.Errorf("no dead letter with seq %d ('spool dead' lists them): %w", seq, spool.ErrNotFound)
	}
	return *found, nil
}

// bytesJSON is a byte string in JSON: text when it is UTF-8, else base64.
type bytesJSON struct {
	Text   *string `json:"text,omitempty"`
	Base64 []byte  `json:"base64,omitempty"`
}

func jsonBytes(b []byte) bytesJSON {
	if utf8.Valid(b) {
		s := string(b)
		return bytesJSON{Text: &s}
	}
	return bytesJSON{Base64: b}
}

type showJSON struct {
	deadJSON
	Header [][2]string `json:"header"`
	Body   bytesJSON   `json:"body"`
	Answer *bytesJSON  `json:"answer"`
}

func (o *spoolOptions) showDead(w io.Writer, sp *spool.Spool, seq uint64) error {
	d, err := findDead(sp, seq)
	if err != nil {
		return err
	}
	req, body, err := splitMessage(d.Data)
	if err != nil {
		return fmt.Errorf("dead letter %d: %w", seq, err)
	}
	if o.json {
		out := showJSON{deadJSON: deadJSON{messageJSON: messageInfo(d.Message), Reason: d.Reason}, Header: [][2]string{}, Body: jsonBytes(body)}
		for _, f := range req.Header {
			out.Header = append(out.Header, [2]string{f.Name, f.Value})
		}
		if len(d.Answer) > 0 {
			a := jsonBytes(d.Answer)
			out.Answer = &a
		}
		return writeJSON(w, out)
	}
	tw := table(w)
	fmt.Fprintf(tw, "seq\t%d\n", d.Seq)
	fmt.Fprintf(tw, "id\t%s\n", d.ID)
	fmt.Fprintf(tw, "peer\t%s\n", d.Peer)
	fmt.Fprintf(tw, "upstream\t%s\n", d.Upstream)
	fmt.Fprintf(tw, "accepted\t%s\n", timeText(d.Accepted))
	fmt.Fprintf(tw, "reason\t%s\n", d.Reason)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n--- request (as the edge received it, hop-by-hop fields removed)\n")
	if _, err := w.Write(requestBytes(req, body)); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n\n--- the server's answer\n")
	if len(d.Answer) == 0 {
		fmt.Fprintf(w, "(none: no answer came back, the delivery is in doubt)\n")
		return nil
	}
	_, err = w.Write(d.Answer)
	if err == nil && d.Answer[len(d.Answer)-1] != '\n' {
		_, err = io.WriteString(w, "\n")
	}
	return err
}

// requestBytes rebuilds the HTTP request of a spooled message, as the origin sends it.
func requestBytes(req *envelope.Request, body []byte) []byte {
	h := req.Header
	if !h.Has("Content-Length") {
		h = append(h.Clone(), httpwire.Field{Name: "Content-Length", Value: strconv.Itoa(len(body))})
	}
	return append(httpwire.AppendRequestHead(nil, req.Method, req.Target, req.ProtoMinor, h), body...)
}

type requeuedJSON struct {
	Seq    uint64 `json:"seq"`
	ID     string `json:"id"`
	NewSeq uint64 `json:"new_seq"`
	NewID  string `json:"new_id"`
}

func (o *spoolOptions) requeue(w io.Writer, sp *spool.Spool, args []string) error {
	var done []requeuedJSON
	var errs []error
	for _, a := range args {
		seq, _ := parseSeq(a) // checked by seqArgs
		m, err := sp.Requeue(seq)
		if errors.Is(err, spool.ErrNotFound) {
			err = fmt.Errorf("no dead letter with seq %d ('spool dead' lists them)", seq)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, requeuedJSON{Seq: seq, ID: spool.MessageID(sp.ID(), seq), NewSeq: m.Seq, NewID: m.ID})
	}
	if o.json {
		if done == nil {
			done = []requeuedJSON{}
		}
		if err := writeJSON(w, done); err != nil {
			return err
		}
	} else {
		for _, r := range done {
			fmt.Fprintf(w, "dead letter %d (%s) requeued as %d (%s)\n", r.Seq, r.ID, r.NewSeq, r.NewID)
		}
		if len(done) > 0 {
			fmt.Fprintf(w, "the edge delivers them when it runs again\n")
		}
	}
	return errors.Join(errs...)
}

func (o *spoolOptions) purge(w io.Writer, sp *spool.Spool, args []string) error {
	var seqs []uint64
	if o.all {
		err := sp.DeadLetters(func(d spool.Dead) bool { seqs = append(seqs, d.Seq); return true })
		if err != nil {
			return err
		}
	}
	for _, a := range args {
		seq, _ := parseSeq(a)
		seqs = append(seqs, seq)
	}
	purged := []uint64{}
	var errs []error
	for _, seq := range seqs {
		err := sp.Purge(seq)
		if errors.Is(err, spool.ErrNotFound) {
			err = fmt.Errorf("no dead letter with seq %d ('spool dead' lists them)", seq)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		purged = append(purged, seq)
	}
	if o.json {
		if err := writeJSON(w, map[string][]uint64{"purged": purged}); err != nil {
			return err
		}
	} else {
		for _, seq := range purged {
			fmt.Fprintf(w, "dead letter %d purged\n", seq)
		}
		if len(seqs) == 0 {
			fmt.Fprintln(w, "no dead letters")
		}
	}
	return errors.Join(errs...)
}

func (o *spoolOptions) drop(w io.Writer, sp *spool.Spool, args []string) error {
	dropped := []uint64{}
	var errs []error
	for _, a := range args {
		seq, _ := parseSeq(a)
		err := sp.Delete(seq)
		if errors.Is(err, spool.ErrNotFound) {
			err = fmt.Errorf("no pending message with seq %d ('spool list' lists them)", seq)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dropped = append(dropped, seq)
	}
	if o.json {
		if err := writeJSON(w, map[string][]uint64{"dropped": dropped}); err != nil {
			return err
		}
	} else {
		for _, seq := range dropped {
			fmt.Fprintf(w, "pending message %d dropped\n", seq)
		}
	}
	return errors.Join(errs...)
}

type exportedJSON struct {
	messageJSON
	File string `json:"file"`
}

func (o *spoolOptions) export(w io.Writer, sp *spool.Spool) error {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return err
	}
	index := filepath.Join(o.dir, "messages.json")
	if _, err := os.Stat(index); err == nil {
		return fmt.Errorf("%s exists: export into an empty directory", index)
	}
	files := []exportedJSON{}
	var werr error
	err := sp.Pending(0, func(m spool.Message) bool {
		req, body, err := splitMessage(m.Data)
		if err != nil {
			werr = fmt.Errorf("message %d: %w", m.Seq, err)
			return false
		}
		name := strconv.FormatUint(m.Seq, 10) + ".http"
		if werr = writeNew(filepath.Join(o.dir, name), requestBytes(req, body)); werr != nil {
			return false
		}
		files = append(files, exportedJSON{messageJSON: messageInfo(m), File: name})
		return true
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(files, "", "  ")
	if err != nil {
		return err
	}
	if err := writeNew(index, append(data, '\n')); err != nil {
		return err
	}
	if o.json {
		return writeJSON(w, map[string]any{"dir": o.dir, "index": index, "messages": files})
	}
	fmt.Fprintf(w, "wrote %d pending messages to %s (index: %s); the spool is unchanged\n", len(files), o.dir, index)
	return nil
}

func (o *spoolOptions) ledgerStats(w io.Writer, l *ledger.Ledger, path string) error {
	counts, err := l.Stats()
	if err != nil {
		return err
	}
	// Nothing delivers from this process: every id recorded sent without an answer is in
	// doubt.
	inDoubt := 0
	if err := l.InDoubt(func(string, ledger.Record) bool { inDoubt++; return true }); err != nil {
		return err
	}
	total := 0
	states := map[string]int{}
	for s, n := range counts {
		total += n
		states[s.String()] = n
	}
	if o.json {
		return writeJSON(w, map[string]any{"file": path, "ids": total, "done": counts[ledger.Done],
			"sending": counts[ledger.Sending], "in_doubt": inDoubt, "states": states})
	}
	tw := table(w)
	fmt.Fprintf(tw, "file\t%s\n", path)
	fmt.Fprintf(tw, "ids\t%d\n", total)
	fmt.Fprintf(tw, "done\t%d\t(delivered: sent again, refused as already_delivered)\n", counts[ledger.Done])
	fmt.Fprintf(tw, "in doubt\t%d\t(the server got it whole, no answer came back: 'spool ledger in-doubt')\n", inDoubt)
	fmt.Fprintf(tw, "sending\t%d\t(never reached the server whole: delivered when the edge sends it again)\n", counts[ledger.Sending])
	return tw.Flush()
}

type ledgerRecordJSON struct {
	ID     string     `json:"id"`
	State  string     `json:"state"`
	Time   *time.Time `json:"time,omitempty"`
	Status int        `json:"status,omitempty"`
}

func (o *spoolOptions) ledgerGet(w io.Writer, l *ledger.Ledger, ids []string) error {
	recs := make([]ledgerRecordJSON, 0, len(ids))
	for _, id := range ids {
		rec, err := l.Get(id)
		if err != nil {
			return err
		}
		r := ledgerRecordJSON{ID: id, State: rec.State.String(), Status: rec.Status}
		if !rec.Time.IsZero() {
			t := rec.Time.UTC()
			r.Time = &t
		}
		recs = append(recs, r)
	}
	if o.json {
		return writeJSON(w, recs)
	}
	tw := table(w)
	fmt.Fprintln(tw, "ID\tSTATE\tSINCE\tSTATUS")
	for _, r := range recs {
		since, status := "-", "-"
		if r.Time != nil {
			since = timeText(*r.Time)
		}
		if r.Status != 0 {
			status = strconv.Itoa(r.Status)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.State, since, status)
	}
	return tw.Flush()
}

type inDoubtJSON struct {
	ID    string    `json:"id"`
	Since time.Time `json:"since"`
}

func (o *spoolOptions) ledgerInDoubt(w, stderr io.Writer, l *ledger.Ledger) error {
	ids := []inDoubtJSON{}
	total := 0
	err := l.InDoubt(func(id string, rec ledger.Record) bool {
		total++
		if o.limit <= 0 || len(ids) < o.limit {
			ids = append(ids, inDoubtJSON{ID: id, Since: rec.Time.UTC()})
		}
		return true
	})
	if err != nil {
		return err
	}
	defer truncated(stderr, len(ids), total, "ids in doubt")
	if o.json {
		return writeJSON(w, ids)
	}
	tw := table(w)
	fmt.Fprintln(tw, "ID\tSINCE")
	for _, r := range ids {
		fmt.Fprintf(tw, "%s\t%s\n", r.ID, timeText(r.Since))
	}
	return tw.Flush()
}
