package scheduler

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// browser is headless Chromium driven over the DevTools protocol on a
// pipe (--remote-debugging-pipe: JSON messages ended by NUL on fds 3 and
// 4), so a test can load pages, wait for a single-page app to render,
// click links and take screenshots without a WebDriver or a websocket
// library. One tab is driven at a time (session).
type browser struct {
	t       *testing.T
	out     string // screenshots and DOM dumps
	cmd     *exec.Cmd
	w       io.WriteCloser
	r       *bufio.Reader
	id      int
	session string
}

func startBrowser(t *testing.T, bin, out string) *browser {
	t.Helper()
	toChrome, ours, err := os.Pipe() // chrome reads fd 3
	if err != nil {
		t.Fatal(err)
	}
	fromChrome, theirs, err := os.Pipe() // chrome writes fd 4
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--window-size=1400,1100", "--no-first-run", "--user-data-dir="+t.TempDir(),
		"--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toChrome, theirs}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	toChrome.Close()
	theirs.Close()
	b := &browser{t: t, out: out, cmd: cmd, w: ours, r: bufio.NewReader(fromChrome)}
	t.Cleanup(func() {
		ours.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		fromChrome.Close()
	})
	b.attach(func(url string) bool { return url == "about:blank" })
	return b
}

// call sends one DevTools command and returns its result, skipping the
// events that arrive meanwhile.
func (b *browser) call(session, method string, params any, result any) error {
	b.id++
	msg := map[string]any{"id": b.id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, _ := json.Marshal(msg)
	if _, err := b.w.Write(append(raw, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	for {
		line, err := b.r.ReadBytes(0)
		if err != nil {
			return fmt.Errorf("%s: reading the answer: %w", method, err)
		}
		var ans struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line[:len(line)-1], &ans); err != nil || ans.ID != b.id {
			continue // an event, or an answer to nobody
		}
		if ans.Error != nil {
			return fmt.Errorf("%s: %s", method, ans.Error.Message)
		}
		if result != nil {
			return json.Unmarshal(ans.Result, result)
		}
		return nil
	}
}

// attach makes the first page whose URL matches the driven tab.
func (b *browser) attach(match func(url string) bool) {
	b.t.Helper()
	var targets struct {
		TargetInfos []struct{ TargetID, Type, URL string } `json:"targetInfos"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := b.call("", "Target.getTargets", map[string]any{}, &targets); err != nil {
			b.t.Fatal(err)
		}
		for _, ti := range targets.TargetInfos {
			if ti.Type == "page" && match(ti.URL) {
				var att struct {
					SessionID string `json:"sessionId"`
				}
				if err := b.call("", "Target.attachToTarget", map[string]any{"targetId": ti.TargetID, "flatten": true}, &att); err != nil {
					b.t.Fatal(err)
				}
				b.session = att.SessionID
				return
			}
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("no browser tab matching; tabs: %+v", targets.TargetInfos)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// eval runs a JavaScript expression in the tab and returns its value.
func (b *browser) eval(expr string, out any) error { return b.evalAs(expr, false, out) }

// evalAs is eval, as if a person's action (a click) ran it when gesture
// is set: links with target=_blank then open their tab (a script's own
// click would be blocked as a pop-up).
func (b *browser) evalAs(expr string, gesture bool, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct{ Text string } `json:"exceptionDetails"`
	}
	if err := b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "userGesture": gesture}, &res); err != nil {
		return err
	}
	if res.ExceptionDetails != nil {
		return fmt.Errorf("javascript: %s", res.ExceptionDetails.Text)
	}
	return json.Unmarshal(res.Result.Value, out)
}

// visit loads url in the tab and waits until its DOM contains want.
func (b *browser) visit(url, name, want string) string {
	b.t.Helper()
	b.navigate(url)
	return b.await(name, want)
}

// navigate loads url in the tab, without waiting for anything.
func (b *browser) navigate(url string) {
	b.t.Helper()
	if err := b.call(b.session, "Page.navigate", map[string]any{"url": url}, nil); err != nil {
		b.t.Fatal(err)
	}
}

// await waits until the tab's DOM contains want (a single-page app renders
// after its API calls), then saves name.html and name.png; it returns the
// DOM.
func (b *browser) await(name, want string) string {
	b.t.Helper()
	return b.awaitDOM(name, fmt.Sprintf("%q", want), func(dom string) bool { return strings.Contains(dom, want) })
}

// awaitDOM waits until ok(the tab's DOM) (what says what it waits for),
// then saves name.html and name.png; it returns the DOM.
func (b *browser) awaitDOM(name, what string, ok func(dom string) bool) string {
	b.t.Helper()
	var dom string
	deadline := time.Now().Add(60 * time.Second)
	for {
		dom = ""
		_ = b.eval("document.documentElement.outerHTML", &dom)
		if ok(dom) {
			break
		}
		if time.Now().After(deadline) {
			_ = os.WriteFile(filepath.Join(b.out, name+".html"), []byte(dom), 0o644)
			b.t.Fatalf("page %s never showed %s (its DOM is in %s.html)", name, what, name)
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // let the last render settle before the picture
	return b.shot(name)
}

// shot saves the tab's DOM as name.html and its picture as name.png; it
// returns the DOM.
func (b *browser) shot(name string) string {
	b.t.Helper()
	var dom string
	_ = b.eval("document.documentElement.outerHTML", &dom)
	_ = os.WriteFile(filepath.Join(b.out, name+".html"), []byte(dom), 0o644)
	var shot struct {
		Data string `json:"data"`
	}
	if err := b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &shot); err != nil {
		b.t.Errorf("screenshot of %s: %v", name, err)
		return dom
	}
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		b.t.Errorf("screenshot of %s: %v", name, err)
		return dom
	}
	if err := os.WriteFile(filepath.Join(b.out, name+".png"), png, 0o644); err != nil {
		b.t.Error(err)
	}
	return dom
}

// text is what the tab shows of the first element matching the CSS
// selector (its innerText, blanks collapsed), "" when there is none.
func (b *browser) text(selector string) string {
	b.t.Helper()
	sj, _ := json.Marshal(selector)
	var s string
	if err := b.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.innerText : ""; })()`, sj), &s); err != nil {
		b.t.Fatal(err)
	}
	return strings.Join(strings.Fields(s), " ")
}

// follow clicks the first link whose text contains label, for a link
// that opens in the same tab, and waits until the tab has left the page;
// it returns the link's address ("" when there is no such link).
func (b *browser) follow(label string) string {
	b.t.Helper()
	var before string
	_ = b.eval("location.href", &before)
	lj, _ := json.Marshal(label)
	var href string
	expr := fmt.Sprintf(`(() => { const a = [...document.querySelectorAll("a")].find(a => a.textContent.includes(%s)); if (!a) return ""; a.click(); return a.href; })()`, lj)
	if err := b.evalAs(expr, true, &href); err != nil {
		b.t.Fatal(err)
	}
	if href == "" {
		return ""
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var now string
		_ = b.eval("location.href", &now)
		if now != before && now != "" {
			return href
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("clicking %q (%s) did not leave %s", label, href, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// click clicks the first link whose text contains label and follows it
// to the tab it opens (a new one for target=_blank); it returns the
// link's address ("" when there is no such link).
func (b *browser) click(label string) string {
	b.t.Helper()
	lj, _ := json.Marshal(label)
	var href string
	expr := fmt.Sprintf(`(() => { const a = [...document.querySelectorAll("a")].find(a => a.textContent.includes(%s)); if (!a) return ""; a.click(); return a.href; })()`, lj)
	if err := b.evalAs(expr, true, &href); err != nil {
		b.t.Fatal(err)
	}
	if href != "" {
		b.attach(func(url string) bool { return url == href })
	}
	return href
}
