"""Removing directory trees that a child process controlled (``tarproc -c``
working directories): through descriptors, never following a symbolic link,
without recursion and with a bounded number of open descriptors, whatever
the child left behind (a link in place of a directory, a tree thousands of
levels deep, directories chmodded 000)."""

import os


#: Directories open at once while removing a tree; deeper ones are moved up
#: to the run directory and removed from there (no recursion, bounded fds).
_MAX_OPEN_DIRS = 32


def _open_dir(parent, name):
    """A descriptor of directory ``name`` in ``parent``, never through a
    symbolic link, with its owner permissions restored (a command may chmod
    its directories 000); ``None`` when it is not a directory."""
    import errno

    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        fd = os.open(name, flags, dir_fd=parent)
    except PermissionError:
        try:
            p = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        except OSError:
            return None
        try:  # chmod the directory held by p: a magic link to it, never a symlink's target
            os.chmod(f"/proc/self/fd/{p}", 0o700)
        except OSError:
            return None
        finally:
            os.close(p)
        try:
            fd = os.open(name, flags, dir_fd=parent)
        except OSError:
            return None
    except OSError as e:
        if e.errno in (errno.ENOTDIR, errno.ELOOP, errno.ENOENT):
            return None
        raise
    try:
        if os.fstat(fd).st_mode & 0o700 != 0o700:
            os.fchmod(fd, 0o700)
    except OSError:
        pass
    return fd


def _unlink(parent, name):
    """Unlink a non-directory; True when ``name`` is gone."""
    try:
        os.unlink(name, dir_fd=parent)
        return True
    except FileNotFoundError:
        return True
    except (IsADirectoryError, PermissionError):
        return False
    except OSError:
        return False


def remove_entry(top, name):
    """Remove ``name`` in the directory ``top`` (a descriptor) and, if it is
    a directory, everything under it: iteratively, through descriptors,
    never following a symbolic link (a link is removed, not its target).
    Directories deeper than :data:`_MAX_OPEN_DIRS` are renamed into ``top``
    and removed from there, so neither the Python stack nor the number of
    open descriptors grows with the depth of the tree."""
    import secrets

    todo = [name]
    while todo:
        first = todo.pop()
        if _unlink(top, first):
            continue
        fd = _open_dir(top, first)
        if fd is None:
            _unlink(top, first)
            continue
        stack = [(fd, first, top, os.listdir(fd), 0)]
        try:
            while stack:
                fd, nm, parent, names, tries = stack[-1]
                if names:
                    child = names.pop()
                    if _unlink(fd, child):
                        continue
                    if len(stack) >= _MAX_OPEN_DIRS:
                        moved = f".deep-{secrets.token_hex(6)}"
                        try:
                            os.rename(child, moved, src_dir_fd=fd, dst_dir_fd=top)
                            todo.append(moved)
                        except OSError:
                            pass
                        continue
                    sub = _open_dir(fd, child)
                    if sub is None:
                        _unlink(fd, child)
                        continue
                    stack.append((sub, child, fd, os.listdir(sub), 0))
                    continue
                # every entry handled: remove the directory itself
                try:
                    os.rmdir(nm, dir_fd=parent)
                except OSError as e:
                    import errno

                    if e.errno == errno.ENOTEMPTY and tries < 3:  # something wrote meanwhile
                        stack[-1] = (fd, nm, parent, os.listdir(fd), tries + 1)
                        continue
                stack.pop()
                os.close(fd)
        finally:
            for entry in stack:
                os.close(entry[0])


def _clear_dir(top, name, fd, names=None):
    """Remove directory ``name`` in ``top``, held open as ``fd`` (``names``:
    its entries, when just listed): the usual case (a few files) in a few
    calls; anything else (a subdirectory, a directory that was replaced or
    has new entries) through :func:`remove_entry`."""
    try:
        for child in os.listdir(fd) if names is None else names:
            os.unlink(child, dir_fd=fd)
        os.rmdir(name, dir_fd=top)
        return
    except OSError:
        pass
    remove_entry(top, name)


def remove_root(path, fd):
    """Empty the run directory held by ``fd`` and remove it, but only if
    ``path`` still names that directory (a command may have replaced it)."""
    try:
        names = os.listdir(fd)
    except OSError:
        names = []
    for name in names:
        remove_entry(fd, name)
    try:
        st, held = os.lstat(path), os.fstat(fd)
        if (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino):
            os.rmdir(path)
    except OSError:
        pass


class Remover:
    """Removes finished sample directories in a thread, off the main loop's
    path (an ``rmdir`` on a disk mounted with ``discard`` waits for the
    device).  ``put(name, fd, names)`` hands over directory ``name`` of the
    run directory and its descriptor (closed once removed), in batches of
    ``batch`` (one wake-up of the thread per batch); at most ``limit``
    batches wait, then ``put`` blocks.  ``close()`` removes the rest and
    waits until all are gone.  The thread works on its own duplicate of the
    run directory's descriptor, so closing that one early can never
    redirect a removal."""

    def __init__(self, top, batch=8, limit=4):
        import queue
        import threading

        self.top = os.dup(top)
        self.batch = []
        self.size = batch
        self.queue = queue.SimpleQueue()
        self.slots = threading.Semaphore(limit)
        self.thread = None

    def put(self, name, fd, names=None):
        self.batch.append((name, fd, names))
        if len(self.batch) >= self.size:
            self._hand_over()

    def _hand_over(self):
        if self.thread is None:
            import threading

            self.thread = threading.Thread(target=self._run, name="tarproc-remove", daemon=True)
            self.thread.start()
        batch, self.batch = self.batch, []
        self.slots.acquire()
        self.queue.put(batch)

    def _run(self):
        try:
            while True:
                batch = self.queue.get()
                if batch is None:
                    return
                for name, fd, names in batch:
                    try:
                        _clear_dir(self.top, name, fd, names)
                    except Exception:  # noqa: BLE001 - left for remove_root
                        pass
                    finally:
                        os.close(fd)
                self.slots.release()
        finally:
            os.close(self.top)

    def close(self):
        """Remove what is handed over or waiting; wait for the thread."""
        if self.thread is False:
            return
        import sys

        if sys.is_finalizing():  # its thread is frozen: remove them here
            for name, fd, names in self.batch:
                try:
                    _clear_dir(self.top, name, fd, names)
                except Exception:  # noqa: BLE001 - left for remove_root
                    pass
            self.batch, self.thread = [], False
            return
        if self.batch:
            self._hand_over()
        thread, self.thread = self.thread, False
        if thread is None:
            os.close(self.top)
        else:
            self.queue.put(None)
            thread.join()
