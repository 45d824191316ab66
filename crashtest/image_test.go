package crashtest_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgfeldera/pgfeldera/feldera/felderatest/oracle"
	"github.com/pgfeldera/pgfeldera/internal/pgcluster"
)

// The container image (`make image`, Containerfile), checked by running
// the image's own binary, not the host build: through `buildah run` on a
// working container from the image, with chroot isolation and the host's
// network, so that 127.0.0.1 reaches the test cluster and the Feldera
// double. It runs when PGFELDERA_IMAGE names the image (CI: .ci/run builds
// it, sets the variable and requires this test to pass, so a skip there
// fails the run); asked for, a missing buildah is a failure.
//
// It needs buildah with the store the image was built into (STORAGE_DRIVER,
// vfs unless set, as in the Makefile; BUILDAH names the program) and the
// rights to run a container from it; the process and file owner checks
// need root, as in CI.
func TestImage(t *testing.T) {
	pgcluster.AnyVersion(t)
	image := os.Getenv("PGFELDERA_IMAGE")
	if image == "" {
		t.Skip("PGFELDERA_IMAGE is not set: run `make image`, then PGFELDERA_IMAGE=pgfeldera:latest (CI does, and requires this test to pass)")
	}
	b := newBuildah(t)
	cfg := b.imageConfig(image)

	// The image's files: exactly these, so no shell, no libc, nothing else.
	files := b.imageFiles(image)
	var names []string
	for n := range files.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	want := []string{"etc", "etc/group", "etc/passwd", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt",
		"pgfeldera", "var", "var/lib", "var/lib/pgfeldera"}
	if !slices.Equal(names, want) {
		t.Errorf("the image holds %q, want exactly %q", names, want)
	}
	t.Logf("image %s: %d layer(s), %.1f MB unpacked, %.1f MB compressed (%d files and directories)",
		image, files.layers, float64(files.unpacked)/1e6, float64(files.compressed)/1e6, len(names))

	// A non-root user, by number (so runAsNonRoot can check it), that the
	// image's passwd names, owning the state volume (mode 0700).
	uidText, gidText, _ := strings.Cut(cfg.User, ":")
	uid, err1 := strconv.Atoi(uidText)
	gid, err2 := strconv.Atoi(gidText)
	if err1 != nil || err2 != nil || uid == 0 || gid == 0 {
		t.Fatalf("image user %q: want numeric non-root uid:gid", cfg.User)
	}
	if !passwdNames(files.passwd, uid) {
		t.Errorf("the image's /etc/passwd has no user %d:\n%s", uid, files.passwd)
	}
	stateFile := envValue(cfg.Env, "STATE_FILE")
	volume := filepath.Dir(stateFile)
	if stateFile == "" || cfg.Volumes[volume] == nil {
		t.Errorf("image: STATE_FILE=%q, volumes %v: want the state file on a volume", stateFile, cfg.Volumes)
	}
	if h, ok := files.entries[strings.TrimPrefix(volume, "/")]; !ok || h.Uid != uid || h.Gid != gid || h.Mode&0o777 != 0o700 {
		t.Errorf("image: %s is not the user's (%d:%d, 0700): %+v", volume, uid, gid, h)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/pgfeldera"}) || !slices.Equal(cfg.Cmd, []string{"run"}) {
		t.Errorf("image: entrypoint %q, cmd %q: want [/pgfeldera] [run]", cfg.Entrypoint, cfg.Cmd)
	}

	ctr := b.container(image)
	// version: the image's version label is the binary's.
	out, code := b.run(ctr, nil, "", "/pgfeldera", "version")
	if code != 0 || strings.TrimSpace(out) != "pgfeldera "+cfg.Labels["org.opencontainers.image.version"] {
		t.Errorf("version: exit %d, %q; the image's label says version %q", code, out, cfg.Labels["org.opencontainers.image.version"])
	}
	for _, l := range []string{"org.opencontainers.image.revision", "org.opencontainers.image.source", "org.opencontainers.image.title"} {
		if cfg.Labels[l] == "" {
			t.Errorf("image: no label %s", l)
		}
	}
	// run --help: exit 0, and the port the image exposes is HTTP_ADDR's default.
	out, code = b.run(ctr, nil, "", "/pgfeldera", "run", "--help")
	if code != 0 || !strings.Contains(out, "usage: pgfeldera run") {
		t.Fatalf("run --help: exit %d\n%s", code, out)
	}
	if port := helpDefaultPort(out, "HTTP_ADDR"); port == "" || cfg.ExposedPorts[port+"/tcp"] == nil {
		t.Errorf("image exposes %v, HTTP_ADDR defaults to port %q", cfg.ExposedPorts, port)
	}
	// No shell to run: `sh -c true` fails. (The runtime's own words for
	// the missing file do not always reach buildah's output; the file
	// list above is what shows it is missing.)
	if out, code = b.run(ctr, nil, "", "/bin/sh", "-c", "true"); code == 0 {
		t.Errorf("/bin/sh in the image: exit 0, want a failure to start it\n%s", out)
	}

	w := newWorld(t, nil)
	w.exec("INSERT INTO users SELECT g, 'u' || g, g FROM generate_series(1, 250) g")
	w.exec("INSERT INTO items SELECT g, 'eu', g * 1.5 FROM generate_series(1, 40) g")
	env := imageEnv(w)

	// ddl against the test cluster: what the host build prints.
	out, code = b.run(ctr, env, "", "/pgfeldera", "ddl")
	host := exec.Command(binary, "ddl")
	host.Env = w.env()
	hostOut, err := host.Output()
	if err != nil {
		t.Fatalf("host ddl: %v", err)
	}
	if code != 0 || !strings.Contains(out, string(hostOut)) || !strings.Contains(out, "CREATE TABLE") {
		t.Errorf("ddl: exit %d\n%s\nthe host build prints:\n%s", code, out, hostOut)
	}

	// run: the snapshot, then the stream, then a graceful stop, as the
	// image's user with the state file on the volume.
	if os.Geteuid() == 0 {
		if err := os.Chown(w.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	} else if err := os.Chmod(w.dir, 0o777); err != nil {
		t.Fatal(err)
	}
	p := w.startImage(b, ctr, env, w.dir+":"+volume)
	w.waitState(60 * time.Second)
	if msg := w.caughtUp(p, 60*time.Second); msg != "" {
		t.Fatalf("after the snapshot: %s", msg)
	}
	w.exec("INSERT INTO users SELECT g, 'streamed', g FROM generate_series(1000, 1049) g")
	w.exec("UPDATE items SET price = price + 1 WHERE sku <= 10")
	w.exec("DELETE FROM users WHERE id <= 5")
	if msg := w.caughtUp(p, 60*time.Second); msg != "" {
		t.Fatalf("after streaming: %s", msg)
	}
	for table, n := range map[string]int{"users": 295, "items": 40} {
		feldera := map[string]string{"users": "users", "items": "catalog_items"}[table]
		r, err := oracle.Compare(context.Background(), w.db, table, w.fel, feldera)
		if err != nil || !r.Equal() || r.Feldera != n {
			t.Errorf("%s: %v %s; want %d rows in the double", table, err, r.String(), n)
		}
	}

	pid := innerPID(t, p)
	root, _ := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
	ids := procIDs(t, pid)
	t.Logf("the image's pgfeldera: pid %d, uid/gid %v, root %s", pid, ids, root)
	if root == "/" {
		t.Errorf("pid %d runs in the host's root, not the image's", pid)
	}
	for _, id := range ids {
		if id == 0 || (os.Geteuid() == 0 && id != uid && id != gid) {
			t.Errorf("pid %d runs with ids %v, want %d:%d", pid, ids, uid, gid)
		}
	}
	if st, err := os.Stat(filepath.Join(w.dir, "state.json")); err != nil {
		t.Error(err)
	} else if sys := st.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (int(sys.Uid) != uid || int(sys.Gid) != gid) {
		t.Errorf("the state file is owned by %d:%d, want the image's user %d:%d", sys.Uid, sys.Gid, uid, gid)
	}
	// buildah run answers SIGTERM by killing the container's process: the
	// graceful stop is the process's own signal.
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exited(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, w.log())
	}
	if !strings.Contains(p.output(), "stopping gracefully") {
		t.Errorf("no graceful stop in the log:\n%s", w.log())
	}
}

// buildah runs buildah on one store.
type buildah struct {
	t       *testing.T
	path    string
	storage string
}

func newBuildah(t *testing.T) *buildah {
	t.Helper()
	b := &buildah{t: t, path: os.Getenv("BUILDAH"), storage: os.Getenv("STORAGE_DRIVER")}
	if b.path == "" {
		var err error
		if b.path, err = exec.LookPath("buildah"); err != nil {
			t.Fatal("PGFELDERA_IMAGE is set but buildah is not found (.ci/install-buildah.sh installs it; BUILDAH names one)")
		}
	}
	if b.storage == "" {
		b.storage = "vfs"
	}
	return b
}

func (b *buildah) command(args ...string) *exec.Cmd {
	return exec.Command(b.path, append([]string{"--storage-driver", b.storage}, args...)...)
}

// output runs a buildah command that must succeed. Only its first word
// is reported: the others may hold settings.
func (b *buildah) output(args ...string) []byte {
	b.t.Helper()
	var stderr bytes.Buffer
	cmd := b.command(args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.t.Fatalf("buildah %s: %v\n%s", args[0], err, stderr.String())
	}
	return out
}

// imageSpec is the part of the image's OCI configuration checked here.
type imageSpec struct {
	User         string
	Env          []string
	Entrypoint   []string
	Cmd          []string
	ExposedPorts map[string]any
	Volumes      map[string]any
	Labels       map[string]string
}

func (b *buildah) imageConfig(image string) imageSpec {
	b.t.Helper()
	var v struct {
		OCIv1 struct {
			Config imageSpec `json:"config"`
		}
	}
	if err := json.Unmarshal(b.output("inspect", "--type", "image", image), &v); err != nil {
		b.t.Fatalf("buildah inspect %s: %v", image, err)
	}
	return v.OCIv1.Config
}

// container is a new working container from image, removed at the end.
func (b *buildah) container(image string) string {
	b.t.Helper()
	name := fmt.Sprintf("pgfeldera-imagetest-%d", os.Getpid())
	b.command("rm", name).Run() // left by a killed run
	b.output("from", "--pull=never", "--name", name, image)
	b.t.Cleanup(func() {
		if out, err := b.command("rm", name).CombinedOutput(); err != nil {
			b.t.Logf("buildah rm %s: %v\n%s", name, err, out)
		}
	})
	return name
}

// runArgs is `buildah run` of argv in ctr: chroot isolation, the host's
// network, env as --env, volume (host:container) mounted.
func (b *buildah) runArgs(ctr string, env []string, volume string, argv ...string) []string {
	args := []string{"run", "--isolation", "chroot", "--network", "host"}
	for _, e := range env {
		args = append(args, "--env", e)
	}
	if volume != "" {
		args = append(args, "--volume", volume)
	}
	return append(append(args, ctr, "--"), argv...)
}

// run runs argv in ctr to its end: its output (stdout and stderr) and
// exit code.
func (b *buildah) run(ctr string, env []string, volume string, argv ...string) (string, int) {
	b.t.Helper()
	cmd := b.command(b.runArgs(ctr, env, volume, argv...)...)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		b.t.Fatalf("buildah run %s: %v", argv[0], err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// imageEnv is the world's pgfeldera settings without its STATE_FILE: the
// image's own (on its volume) applies.
func imageEnv(w *world) []string {
	host := map[string]bool{}
	for _, e := range os.Environ() {
		host[e] = true
	}
	var env []string
	for _, e := range w.env() {
		if !host[e] && !strings.HasPrefix(e, "STATE_FILE=") {
			env = append(env, e)
		}
	}
	return env
}

// startImage runs `pgfeldera run` in ctr as w.start runs the host build.
func (w *world) startImage(b *buildah, ctr string, env []string, volume string) *proc {
	w.t.Helper()
	cmd := b.command(b.runArgs(ctr, env, volume, "/pgfeldera", "run")...)
	p := w.launch(cmd)
	w.t.Cleanup(func() {
		if !exitedNow(p) {
			for _, pid := range descendants(cmd.Process.Pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		p.kill()
	})
	return p
}

// innerPID is the container's pgfeldera process under p's buildah.
func innerPID(t *testing.T, p *proc) int {
	t.Helper()
	for _, pid := range descendants(p.cmd.Process.Pid) {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "pgfeldera" {
			return pid
		}
	}
	t.Fatalf("no pgfeldera process under buildah (pid %d)", p.cmd.Process.Pid)
	return 0
}

// descendants lists the processes under pid, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], n)
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// procIDs is a process's real, effective, saved and filesystem uids and
// gids, as the host sees them.
func procIDs(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			ids = append(ids, atois(rest)...)
		} else if rest, ok := strings.CutPrefix(sc.Text(), "Gid:"); ok {
			ids = append(ids, atois(rest)...)
		}
	}
	if len(ids) != 8 {
		t.Fatalf("pid %d: cannot read its ids from /proc", pid)
	}
	return ids
}

func atois(s string) []int {
	var out []int
	for _, f := range strings.Fields(s) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// imageFiles is the image's file system as pushed to an OCI layout.
type imageFiles struct {
	entries    map[string]*tar.Header // cleaned path without the leading /
	passwd     string
	layers     int
	unpacked   int64 // bytes of file content
	compressed int64 // bytes of the gzip layers
}

func (b *buildah) imageFiles(image string) imageFiles {
	b.t.Helper()
	dir := filepath.Join(b.t.TempDir(), "oci")
	b.output("push", "--quiet", image, "oci:"+dir)
	readJSON := func(name string, v any) {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			err = json.Unmarshal(raw, v)
		}
		if err != nil {
			b.t.Fatalf("the pushed image: %s: %v", name, err)
		}
	}
	blob := func(digest string) string {
		return filepath.Join("blobs", strings.Replace(digest, ":", "/", 1))
	}
	var index struct{ Manifests []struct{ Digest string } }
	readJSON("index.json", &index)
	if len(index.Manifests) != 1 {
		b.t.Fatalf("the pushed image has %d manifests, want 1", len(index.Manifests))
	}
	var manifest struct {
		Layers []struct {
			Digest string
			Size   int64
		}
	}
	readJSON(blob(index.Manifests[0].Digest), &manifest)
	files := imageFiles{entries: map[string]*tar.Header{}, layers: len(manifest.Layers)}
	for _, l := range manifest.Layers {
		files.readLayer(b.t, filepath.Join(dir, blob(l.Digest)), l.Size)
	}
	return files
}

// readLayer adds a layer's entries and sizes: a gzip layer counts as
// stored, an uncompressed one as gzip would ship it.
func (files *imageFiles) readLayer(t *testing.T, name string, size int64) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var r io.Reader = br
	var zipped countWriter
	zw := gzip.NewWriter(&zipped)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		if r, err = gzip.NewReader(br); err != nil {
			t.Fatal(err)
		}
		zipped = countWriter(size)
		zw = nil
	} else {
		r = io.TeeReader(br, zw)
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("layer %s: %v", filepath.Base(name), err)
		}
		entry := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if entry == "" {
			continue
		}
		files.entries[entry] = h
		files.unpacked += h.Size
		if entry == "etc/passwd" {
			p, _ := io.ReadAll(tr)
			files.passwd = string(p)
		}
	}
	io.Copy(io.Discard, r) // the tar's end, for the compressed count
	if zw != nil {
		zw.Close()
	}
	files.compressed += int64(zipped)
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// passwdNames reports whether passwd has an entry for uid.
func passwdNames(passwd string, uid int) bool {
	for _, line := range strings.Split(passwd, "\n") {
		if f := strings.Split(line, ":"); len(f) >= 7 && f[0] != "" && f[2] == strconv.Itoa(uid) {
			return true
		}
	}
	return false
}

func envValue(env []string, name string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			return v
		}
	}
	return ""
}

// helpDefaultPort is the port of a listen address's default in `run --help`.
func helpDefaultPort(help, name string) string {
	for _, line := range strings.Split(help, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == name {
			if _, port, err := net.SplitHostPort(f[2]); err == nil {
				return port
			}
		}
	}
	return ""
}
