package specgen

import (
	"errors"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podbay/podbay/internal/errdefs"
)

// mountLine renders a mount as "dest type source opt,opt".
func mountLine(m specs.Mount) string {
	return m.Destination + " " + m.Type + " " + m.Source + " " + strings.Join(m.Options, ",")
}

func mountLines(ms []specs.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, mountLine(m))
	}
	return out
}

const (
	mProc    = "/proc proc proc nosuid,noexec,nodev"
	mDev     = "/dev tmpfs tmpfs nosuid,strictatime,mode=755,size=65536k"
	mSysRO   = "/sys sysfs sysfs nosuid,noexec,nodev,ro"
	mSysRW   = "/sys sysfs sysfs nosuid,noexec,nodev,rw"
	mPts     = "/dev/pts devpts devpts nosuid,noexec,newinstance,ptmxmode=0666,mode=0620,gid=5"
	mShm     = "/dev/shm tmpfs shm nosuid,noexec,nodev,mode=1777,size=65536k"
	mMqueue  = "/dev/mqueue mqueue mqueue nosuid,noexec,nodev"
	mCgroup  = "/sys/fs/cgroup cgroup cgroup nosuid,noexec,nodev,relatime,ro"
	mCgroupW = "/sys/fs/cgroup cgroup cgroup nosuid,noexec,nodev,relatime,rw"
	mResolv  = "/etc/resolv.conf bind /sb/resolv.conf rbind,rprivate,rw"
	mHosts   = "/etc/hosts bind /sb/hosts rbind,rprivate,rw"
)

func TestContainerMounts(t *testing.T) {
	files := []File{{Source: "/sb/resolv.conf", Dest: "/etc/resolv.conf"}, {Source: "/sb/hosts", Dest: "/etc/hosts"}}
	for _, tc := range []struct {
		name        string
		mod         func(*Container)
		want        []string
		propagation string
	}{
		{"defaults with sandbox files", func(*Container) {},
			[]string{mProc, mDev, mSysRO, mPts, mShm, mMqueue, mResolv, mHosts, mCgroup}, ""},
		{"readonly rootfs binds the files read-only", func(c *Container) { c.Security.ReadonlyRootfs = true },
			[]string{mProc, mDev, mSysRO, mPts, mShm, mMqueue,
				"/etc/resolv.conf bind /sb/resolv.conf rbind,rprivate,ro", "/etc/hosts bind /sb/hosts rbind,rprivate,ro", mCgroup}, ""},
		{"privileged has rw sysfs and cgroupfs", func(c *Container) { c.Sandbox.Privileged, c.Security.Privileged = true, true },
			[]string{mProc, mDev, mSysRW, mPts, mShm, mMqueue, mResolv, mHosts, mCgroupW}, ""},
		{"host ipc binds the host's /dev/shm", hostIPC,
			[]string{mProc, mDev, mSysRO, mPts, mMqueue, "/dev/shm bind /dev/shm rbind,rprivate,rw", mResolv, mHosts, mCgroup}, ""},
		{"sandbox shm", func(c *Container) { c.Sandbox.ShmPath = "/run/podbay/sb1/shm" },
			[]string{mProc, mDev, mSysRO, mPts, mMqueue, "/dev/shm bind /run/podbay/sb1/shm rbind,rprivate,rw", mResolv, mHosts, mCgroup}, ""},
		{"cri mount options", func(c *Container) {
			c.Mounts = []Mount{
				{ContainerPath: "/data", HostPath: "/srv/data"},
				{ContainerPath: "/conf", HostPath: "/srv/conf", Readonly: true, Propagation: PropagationPrivate},
			}
		}, []string{mProc, mDev, mSysRO, "/data bind /srv/data rbind,rprivate,rw", "/conf bind /srv/conf rbind,rprivate,ro",
			mPts, mShm, mMqueue, mResolv, mHosts, mCgroup}, ""},
		{"recursive read-only", func(c *Container) {
			c.Mounts = []Mount{
				{ContainerPath: "/rro", HostPath: "/srv/rro", Readonly: true, RecursiveReadOnly: true},
				{ContainerPath: "/rro2", HostPath: "/srv/rro2", Readonly: true, RecursiveReadOnly: true, Propagation: PropagationPrivate},
			}
		}, []string{mProc, mDev, mSysRO, "/rro bind /srv/rro rbind,rprivate,ro,rro", "/rro2 bind /srv/rro2 rbind,rprivate,ro,rro",
			mPts, mShm, mMqueue, mResolv, mHosts, mCgroup}, ""},
		{"rslave", func(c *Container) {
			c.Mounts = []Mount{{ContainerPath: "/in", HostPath: "/mnt/in", Propagation: PropagationHostToContainer}}
		}, []string{mProc, mDev, mSysRO, "/in bind /mnt/in rbind,rslave,rw", mPts, mShm, mMqueue, mResolv, mHosts, mCgroup}, "rslave"},
		{"rshared", func(c *Container) {
			c.Mounts = []Mount{{ContainerPath: "/both", HostPath: "/mnt/both", Propagation: PropagationBidirectional}}
		}, []string{mProc, mDev, mSysRO, "/both bind /mnt/both rbind,rshared,rw", mPts, mShm, mMqueue, mResolv, mHosts, mCgroup}, "rshared"},
		{"rshared then rslave stays rshared", func(c *Container) {
			c.Mounts = []Mount{
				{ContainerPath: "/both", HostPath: "/mnt/both", Propagation: PropagationBidirectional},
				{ContainerPath: "/in", HostPath: "/mnt/in", Propagation: PropagationHostToContainer},
			}
		}, []string{mProc, mDev, mSysRO, "/both bind /mnt/both rbind,rshared,rw", "/in bind /mnt/in rbind,rslave,rw",
			mPts, mShm, mMqueue, mResolv, mHosts, mCgroup}, "rshared"},
		{"rslave then rshared becomes rshared", func(c *Container) {
			c.Mounts = []Mount{
				{ContainerPath: "/in", HostPath: "/mnt/in", Propagation: PropagationHostToContainer},
				{ContainerPath: "/both", HostPath: "/mnt/both", Propagation: PropagationBidirectional},
			}
		}, []string{mProc, mDev, mSysRO, "/in bind /mnt/in rbind,rslave,rw", "/both bind /mnt/both rbind,rshared,rw",
			mPts, mShm, mMqueue, mResolv, mHosts, mCgroup}, "rshared"},
		{"cri mounts replace base mounts and files", func(c *Container) {
			c.Mounts = []Mount{
				{ContainerPath: "/etc/hosts", HostPath: "/mine/hosts", Readonly: true},
				{ContainerPath: "/dev/shm/", HostPath: "/mine/shm"},
				{ContainerPath: "/sys/fs/cgroup", HostPath: "/mine/cgroup"},
			}
		}, []string{mProc, mDev, mSysRO, mPts, mMqueue, mResolv, "/etc/hosts bind /mine/hosts rbind,rprivate,ro",
			"/dev/shm bind /mine/shm rbind,rprivate,rw", "/sys/fs/cgroup bind /mine/cgroup rbind,rprivate,rw"}, ""},
		{"cri /dev replaces everything under /dev", func(c *Container) {
			c.Mounts = []Mount{{ContainerPath: "/dev", HostPath: "/dev"}}
		}, []string{mProc, mSysRO, "/dev bind /dev rbind,rprivate,rw", mResolv, mHosts, mCgroup}, ""},
		{"cri mount replaces the sandbox shm", func(c *Container) {
			c.Sandbox.ShmPath = "/run/podbay/sb1/shm"
			c.Mounts = []Mount{{ContainerPath: "/dev/shm", HostPath: "/mine/shm"}}
		}, []string{mProc, mDev, mSysRO, mPts, mMqueue, mResolv, mHosts, "/dev/shm bind /mine/shm rbind,rprivate,rw", mCgroup}, ""},
		{"relative container path is from the root", func(c *Container) {
			c.Mounts = []Mount{{ContainerPath: "data/", HostPath: "/srv/data"}}
		}, []string{mProc, mDev, mSysRO, "/data bind /srv/data rbind,rprivate,rw", mPts, mShm, mMqueue, mResolv, mHosts, mCgroup}, ""},
		{"parents before children", func(c *Container) {
			c.Files = nil
			c.Mounts = []Mount{
				{ContainerPath: "/a/b/c", HostPath: "/h/c"},
				{ContainerPath: "/a", HostPath: "/h/a"},
				{ContainerPath: "/srv/x/y", HostPath: "/h/y"},
				{ContainerPath: "/a/b", HostPath: "/h/b"},
			}
		}, []string{mProc, mDev, mSysRO, "/a bind /h/a rbind,rprivate,rw", mPts, mShm, mMqueue, "/a/b bind /h/b rbind,rprivate,rw",
			mCgroup, "/a/b/c bind /h/c rbind,rprivate,rw", "/srv/x/y bind /h/y rbind,rprivate,rw"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Files = files
			tc.mod(&c)
			s := mustSpec(t, c, Host{})
			got := mountLines(s.Mounts)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("mounts\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if s.Linux.RootfsPropagation != tc.propagation {
				t.Fatalf("rootfs propagation %q, want %q", s.Linux.RootfsPropagation, tc.propagation)
			}
			for i, m := range s.Mounts {
				for _, later := range s.Mounts[i+1:] {
					if strings.HasPrefix(m.Destination, later.Destination+"/") {
						t.Fatalf("%s is mounted before its parent %s", m.Destination, later.Destination)
					}
				}
			}
		})
	}
}

func TestContainerMountsRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mounts []Mount
		files  []File
	}{
		{"relative host path", []Mount{{ContainerPath: "/d", HostPath: "srv/d"}}, nil},
		{"empty host path", []Mount{{ContainerPath: "/d"}}, nil},
		{"over the root", []Mount{{ContainerPath: "/", HostPath: "/srv"}}, nil},
		{"over the root, uncleaned", []Mount{{ContainerPath: "/a/..", HostPath: "/srv"}}, nil},
		{"two at one place", []Mount{{ContainerPath: "/d", HostPath: "/a"}, {ContainerPath: "/d/", HostPath: "/b"}}, nil},
		{"unknown propagation", []Mount{{ContainerPath: "/d", HostPath: "/a", Propagation: "shared"}}, nil},
		{"recursive read-only but writable", []Mount{{ContainerPath: "/d", HostPath: "/a", RecursiveReadOnly: true}}, nil},
		{"recursive read-only with rslave", []Mount{{ContainerPath: "/d", HostPath: "/a", Readonly: true, RecursiveReadOnly: true,
			Propagation: PropagationHostToContainer}}, nil},
		{"recursive read-only with rshared", []Mount{{ContainerPath: "/d", HostPath: "/a", Readonly: true, RecursiveReadOnly: true,
			Propagation: PropagationBidirectional}}, nil},
		// runc refuses mounts inside /proc but for a few lxcfs files.
		{"inside /proc", []Mount{{ContainerPath: "/proc/sys", HostPath: "/srv"}}, nil},
		{"inside /proc, uncleaned", []Mount{{ContainerPath: "/x/../proc/self/fd", HostPath: "/srv"}}, nil},
		{"file with a relative destination", nil, []File{{Source: "/sb/hosts", Dest: "etc/hosts"}}},
		{"file without a source", nil, []File{{Dest: "/etc/hosts"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testContainer()
			c.Mounts, c.Files = tc.mounts, tc.files
			if _, err := ContainerSpec(c, Host{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v, want an invalid argument", err)
			}
		})
	}
}

func TestContainerMountsInsideProc(t *testing.T) {
	for _, dest := range procMountable {
		c := testContainer()
		c.Mounts = []Mount{{ContainerPath: dest, HostPath: "/var/lib/lxcfs" + dest}}
		if _, err := ContainerSpec(c, Host{}); err != nil {
			t.Errorf("mount at %s: %v", dest, err)
		}
	}
}
