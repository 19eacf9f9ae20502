# dblock — distributed locks in the database you already run.
#
#   make            library (shared + static), programs, dblock.pc
#   make demo       the bank-withdrawal demo on a temporary SQLite file
#   make check      the whole test suite against real SQLite, PostgreSQL and
#                   MariaDB servers it starts itself (plus ASan/UBSan, TSan)
#   make check-quick  the normal tree's suites only, for everyday work
#   make bench      the benchmark (docs/BENCH.md)
#   make install    PREFIX=/usr/local DESTDIR=
#
# SAN=asan or SAN=tsan builds an instrumented tree under build-$(SAN)/.

VERSION   := 0.1.0
SOMAJOR   := 0
PREFIX    ?= /usr/local
DESTDIR   ?=
LIBDIR    ?= $(PREFIX)/lib
INCDIR    ?= $(PREFIX)/include
BINDIR    ?= $(PREFIX)/bin
SBINDIR   ?= $(PREFIX)/sbin
DATADIR   ?= $(PREFIX)/share
MANDIR    ?= $(DATADIR)/man
# The Python binding (python/, docs/python.md) goes where $(PYTHON) looks
# for packages under PREFIX; nothing is installed for it without a python3.
PYTHON    ?= python3
PYTHONDIR ?= $(shell $(PYTHON) -c 'import site; print(site.getsitepackages(["$(PREFIX)"])[-1])' 2>/dev/null)

CC        ?= cc
SAN       ?=
B         := build$(if $(SAN),-$(SAN))

PG_CFLAGS := $(shell pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
PG_LIBS   := $(shell pkg-config --libs libpq 2>/dev/null || echo -lpq)
MY_CFLAGS := $(shell pkg-config --cflags libmariadb 2>/dev/null || mysql_config --include 2>/dev/null)
MY_LIBS   := $(shell pkg-config --libs libmariadb 2>/dev/null || mysql_config --libs 2>/dev/null)
LITE_LIBS := $(shell pkg-config --libs sqlite3 2>/dev/null || echo -lsqlite3)

# Each backend is optional: WITH_PG=0, WITH_MYSQL=0 or WITH_SQLITE=0 leaves
# it out (a URL for it then fails at open with DBLOCK_EUNSUPPORTED). By
# default a backend is built when its client library's header is found.
have = $(shell printf '\043include <$(1)>\n' | $(CC) $(2) -E -x c - >/dev/null 2>&1 && echo 1 || echo 0)
WITH_PG     ?= $(call have,libpq-fe.h,$(PG_CFLAGS))
WITH_MYSQL  ?= $(call have,mysql.h,$(MY_CFLAGS))
WITH_SQLITE ?= $(call have,sqlite3.h,)
ifneq ($(WITH_PG),1)
  PG_CFLAGS :=
  PG_LIBS :=
endif
ifneq ($(WITH_MYSQL),1)
  MY_CFLAGS :=
  MY_LIBS :=
endif
ifneq ($(WITH_SQLITE),1)
  LITE_LIBS :=
endif
BACKEND_FLAGS := -DDBLOCK_WITH_PG=$(if $(filter 1,$(WITH_PG)),1,0) \
                 -DDBLOCK_WITH_MYSQL=$(if $(filter 1,$(WITH_MYSQL)),1,0) \
                 -DDBLOCK_WITH_SQLITE=$(if $(filter 1,$(WITH_SQLITE)),1,0)

WARN      := -Wall -Wextra -Wstrict-prototypes -Wwrite-strings -Wshadow \
             -Wno-unused-parameter -Werror
SANFLAGS_asan := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
SANFLAGS_tsan := -fsanitize=thread -fno-omit-frame-pointer
SANFLAGS  := $(SANFLAGS_$(SAN))
# (the sanitizer trees also assert "caller holds the client mutex": sync.c)
CHECKFLAGS := $(if $(SAN),-DDBL_CHECK_LOCKS)
OPT       := $(if $(SAN),-O1 -g,-O2 -g)
CFLAGS    ?=
CPPFLAGS  ?=
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE -fPIC $(OPT) $(WARN) $(SANFLAGS) $(CHECKFLAGS) -Iinclude -Isrc \
              $(BACKEND_FLAGS) $(PG_CFLAGS) $(MY_CFLAGS) $(CPPFLAGS) $(CFLAGS)
LDLIBS    := $(PG_LIBS) $(MY_LIBS) $(LITE_LIBS) -lpthread
ALL_LDFLAGS := $(SANFLAGS) $(LDFLAGS)

LIB_SRC   := src/base/url.c src/core/client.c src/core/pool.c src/core/error.c src/core/lock.c \
             src/core/watchdog.c src/core/admin.c src/core/migrate.c src/core/doctor.c src/core/cancel.c src/core/stats.c src/core/sync.c src/core/queue.c src/core/wait.c src/core/board.c \
             src/drivers/driver.c src/drivers/topology.c \
             $(if $(filter 1,$(WITH_PG)),src/drivers/pg.c) $(if $(filter 1,$(WITH_MYSQL)),src/drivers/mysql.c) \
             $(if $(filter 1,$(WITH_SQLITE)),src/drivers/sqlite.c) \
             src/sql/dialects.c src/sql/run.c src/sql/postgres.c src/sql/mysql.c src/sql/sqlite.c \
             src/strategies/registry.c src/strategies/lease.c src/strategies/insert.c src/strategies/for_update.c \
             src/strategies/optimistic.c
LIB_OBJ   := $(patsubst src/%.c,$(B)/obj/%.o,$(LIB_SRC)) $(B)/obj/migrations.o
MIGRATIONS := $(wildcard migrations/*/*.sql)

PROGRAMS  := $(B)/dblock $(B)/dblock-bank $(B)/dblock-reaper
TESTS     := $(B)/test_url $(B)/test_driver $(B)/test_migrate $(B)/test_conformance $(B)/test_waiters $(B)/test_fenced \
             $(B)/test_faults $(B)/test_contention $(B)/test_bank $(B)/test_cli $(B)/test_reaper $(B)/test_topology \
             $(B)/test_scale
HELPERS   := $(B)/lockhelper
EXAMPLES  := $(B)/examples/basic_lock $(B)/examples/fenced_write $(B)/examples/worker_cancel

SONAME    := libdblock.so.$(SOMAJOR)

.PHONY: all lib programs tests header-test demo check check-quick bench install uninstall clean
all: lib programs $(B)/dblock.pc header-test $(B)/migrations-export/.stamp $(B)/man3/.stamp

lib: $(B)/libdblock.a $(B)/libdblock.so
programs: $(PROGRAMS) $(B)/dblock-bench
tests: $(TESTS) $(HELPERS) $(EXAMPLES)

# Objects depend on the backend choice: changing WITH_* rebuilds them.
BACKENDS_STAMP := $(B)/.backends-$(WITH_PG)$(WITH_MYSQL)$(WITH_SQLITE)
$(BACKENDS_STAMP):
	@mkdir -p $(B)
	rm -f $(B)/.backends-*
	touch $@

$(B)/obj/%.o: src/%.c include/dblock.h $(wildcard src/*/*.h) $(BACKENDS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

# (the folders too: a renamed or removed file changes only their mtime)
$(B)/migrations.c: $(MIGRATIONS) $(wildcard migrations/*/) tools/embed-migrations.sh
	@mkdir -p $(B)
	sh tools/embed-migrations.sh migrations > $@.tmp && mv $@.tmp $@

$(B)/obj/migrations.o: $(B)/migrations.c src/core/migrations.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(B)/libdblock.a: $(LIB_OBJ)
	rm -f $@
	ar rcs $@ $^

# Only the public API (dblock_*) is exported: src/dblock.map.
$(B)/libdblock.so.$(VERSION): $(LIB_OBJ) src/dblock.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/dblock.map $(ALL_LDFLAGS) \
	  -o $@ $(LIB_OBJ) $(LDLIBS)

$(B)/libdblock.so: $(B)/libdblock.so.$(VERSION)
	ln -sf libdblock.so.$(VERSION) $(B)/$(SONAME)
	ln -sf libdblock.so.$(VERSION) $@

# Programs and tests include only the public header (-Iinclude), and link
# the static library so they run from the tree without installing.
PROG_CFLAGS := -std=c11 -D_GNU_SOURCE $(OPT) $(WARN) $(SANFLAGS) -Iinclude $(CPPFLAGS) $(CFLAGS)

# dblock: main and dispatch (dblock.c), one file per command (cmd_*.c), the
# shared plumbing (dblock_cli.c), output (out.c) and run's supervisor.
DBLOCK_CMDS := migrate acquire release run status list stats doctor reap force_unlock forget
DBLOCK_SRC := src/tools/dblock.c src/tools/dblock_cli.c src/tools/out.c src/tools/supervise.c \
              $(patsubst %,src/tools/cmd_%.c,$(DBLOCK_CMDS)) src/tools/cli.c
DBLOCK_HDR := src/tools/cli.h src/tools/dblock_cli.h src/tools/out.h src/tools/supervise.h
$(B)/dblock: $(DBLOCK_SRC) $(DBLOCK_HDR) $(B)/libdblock.a
	$(CC) $(PROG_CFLAGS) -o $@ $(DBLOCK_SRC) $(B)/libdblock.a $(ALL_LDFLAGS) $(LDLIBS)
$(B)/dblock-reaper: src/tools/dblock_reaper.c src/tools/cli.h src/tools/cli.c $(B)/libdblock.a
	$(CC) $(PROG_CFLAGS) -o $@ src/tools/dblock_reaper.c src/tools/cli.c $(B)/libdblock.a $(ALL_LDFLAGS) $(LDLIBS)
$(B)/bank_sql.c: $(wildcard sql/*/bank.sql) tools/embed-sql.sh
	@mkdir -p $(B)
	sh tools/embed-sql.sh sql > $@.tmp && mv $@.tmp $@
# The demo also talks to its own account table through the client
# libraries, as an application would (bank_account.c).
BANK_SRC := src/tools/dblock_bank.c src/tools/bank_account.c src/tools/cli.c
$(B)/dblock-bank: $(BANK_SRC) src/tools/bank_account.h src/tools/cli.h $(B)/bank_sql.c $(B)/libdblock.a \
		$(BACKENDS_STAMP)
	$(CC) $(PROG_CFLAGS) $(BACKEND_FLAGS) $(PG_CFLAGS) $(MY_CFLAGS) -o $@ $(BANK_SRC) \
	  $(B)/bank_sql.c $(B)/libdblock.a $(ALL_LDFLAGS) $(LDLIBS)

# Tests may also include the driver interface (test_driver exercises it
# directly); everything else goes through dblock.h.
TEST_CFLAGS := $(PROG_CFLAGS) -Isrc -Itests
$(B)/test_%: tests/test_%.c tests/testutil.h tests/testutil.c $(B)/libdblock.a
	$(CC) $(TEST_CFLAGS) -o $@ $< tests/testutil.c $(B)/libdblock.a $(ALL_LDFLAGS) $(LDLIBS) -lcmocka
# (the suites run per backend x strategy pair share tests/pairs.h)
$(B)/test_conformance $(B)/test_waiters $(B)/test_fenced $(B)/test_faults: tests/pairs.h
# test_cli runs the programs through tests/cli_harness.c and reads their
# JSON with json-c.
$(B)/test_cli: tests/test_cli.c tests/cli_harness.h tests/cli_harness.c tests/testutil.h tests/testutil.c \
		$(B)/libdblock.a
	$(CC) $(TEST_CFLAGS) -o $@ $< tests/cli_harness.c tests/testutil.c $(B)/libdblock.a $(ALL_LDFLAGS) \
	  $(LDLIBS) -ljson-c -lcmocka
# The examples (examples/) use the public header only, as a user's program
# would; tests/check-examples.sh runs them.
$(B)/examples/%: examples/%.c include/dblock.h $(B)/libdblock.a
	@mkdir -p $(dir $@)
	$(CC) $(PROG_CFLAGS) -o $@ $< $(B)/libdblock.a $(ALL_LDFLAGS) $(LDLIBS)
$(B)/lockhelper: tests/lockhelper.c $(B)/libdblock.a
	$(CC) $(PROG_CFLAGS) -o $@ $< $(B)/libdblock.a $(ALL_LDFLAGS) $(LDLIBS)

# The benchmark may use the driver layer directly for its raw-SQL floor;
# with hiredis (libhiredis-dev) it also measures Redis beside dblock.
BENCH_REDIS := $(shell pkg-config --exists hiredis 2>/dev/null && echo 1)
$(B)/dblock-bench: bench/dblock_bench.c $(B)/libdblock.a
	$(CC) $(PROG_CFLAGS) -Isrc $(if $(BENCH_REDIS),-DDBLOCK_BENCH_REDIS) -o $@ $< $(B)/libdblock.a \
	  $(ALL_LDFLAGS) $(LDLIBS) $(if $(BENCH_REDIS),-lhiredis)

# pkg-config file for a prefix (the tree's copy: PREFIX as given to make;
# make install writes one for the PREFIX it installs to). The static link
# needs the client libraries' own flags only: libpq.pc's private ones name
# static libraries Debian does not ship, so they are not pulled in.
PC_LINES = 'prefix=$(1)' 'libdir=$(2)' 'includedir=$(3)' '' \
	  'Name: dblock' 'Description: distributed locks in PostgreSQL, MySQL/MariaDB and SQLite' \
	  'Version: $(VERSION)' 'Libs: -L$${libdir} -ldblock' \
	  'Libs.private: $(LDLIBS)' 'Cflags: -I$${includedir}'
$(B)/dblock.pc: Makefile $(B)/.prefix-$(subst /,_,$(PREFIX))
	@mkdir -p $(B)
	printf '%s\n' $(call PC_LINES,$(PREFIX),$(LIBDIR),$(INCDIR)) > $@
$(B)/.prefix-$(subst /,_,$(PREFIX)):
	@mkdir -p $(B)
	rm -f $(B)/.prefix-*
	touch $@

# The migrations in Flyway and golang-migrate layouts, generated from the
# one source (migrations/<backend>/); installed under share/dblock/.
$(B)/migrations-export/.stamp: $(MIGRATIONS) $(wildcard migrations/*/down/*.sql) tools/export-migrations.sh
	@mkdir -p $(B)/migrations-export
	sh tools/export-migrations.sh migrations $(B)/migrations-export
	touch $@

# man 3: one page per group of functions, and a .so alias per function,
# generated from the header (tools/gen-man3.sh), so they cannot drift;
# man/dblock.3 is the overview.
$(B)/man3/.stamp: include/dblock.h man/dblock.3 tools/gen-man3.sh
	@mkdir -p $(B)/man3
	sh tools/gen-man3.sh include/dblock.h $(B)/man3 man/dblock.3
	touch $@

# The public header compiles alone, strictly.
header-test: $(B)/.header-ok
$(B)/.header-ok: include/dblock.h
	@mkdir -p $(B)
	printf '#include "dblock.h"\nint main(void) { return dblock_strerror(0) == 0; }\n' > $(B)/header_test.c
	$(CC) -std=c11 -pedantic -Wall -Wextra -Werror -Iinclude -c $(B)/header_test.c -o $(B)/header_test.o
	touch $@

demo:
	@tests/install-deps.sh --demo
	@$(MAKE) --no-print-directory $(B)/dblock-bank
	@$(B)/dblock-bank

check:
	@tests/install-deps.sh
	@sh tests/run-all.sh

# Everyday development: the normal tree only, every backend x strategy
# pair, no sanitizer trees, no replicated topologies (about 6 minutes).
check-quick:
	@tests/install-deps.sh
	@$(MAKE) -s -j$$(nproc 2>/dev/null || echo 2) all tests
	@DBLOCK_TEST_QUICK=1 tests/with-servers.sh sh tests/run-suites.sh

bench:
	@tests/install-deps.sh
	@$(MAKE) -s --no-print-directory all
	@tests/with-servers.sh sh bench/run.sh $(BENCH_ARGS)

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) \
	  $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 \
	  $(DESTDIR)$(MANDIR)/man3
	install -m 644 include/dblock.h $(DESTDIR)$(INCDIR)/
	install -m 644 $(B)/libdblock.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(B)/libdblock.so.$(VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libdblock.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf libdblock.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libdblock.so
	printf '%s\n' $(call PC_LINES,$(PREFIX),$(LIBDIR),$(INCDIR)) > $(DESTDIR)$(LIBDIR)/pkgconfig/dblock.pc
	chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/dblock.pc
	install -m 755 $(B)/dblock $(B)/dblock-bank $(DESTDIR)$(BINDIR)/
	install -m 755 $(B)/dblock-reaper $(DESTDIR)$(SBINDIR)/
	for d in postgres mysql sqlite; do \
	  install -d $(DESTDIR)$(DATADIR)/dblock/migrations/$$d $(DESTDIR)$(DATADIR)/dblock/migrations/$$d/down \
	    $(DESTDIR)$(DATADIR)/dblock/migrations/flyway/$$d $(DESTDIR)$(DATADIR)/dblock/migrations/golang-migrate/$$d; \
	  install -m 644 migrations/$$d/*.sql $(DESTDIR)$(DATADIR)/dblock/migrations/$$d/; \
	  install -m 644 migrations/$$d/down/*.sql $(DESTDIR)$(DATADIR)/dblock/migrations/$$d/down/; \
	  install -m 644 $(B)/migrations-export/flyway/$$d/*.sql $(DESTDIR)$(DATADIR)/dblock/migrations/flyway/$$d/; \
	  install -m 644 $(B)/migrations-export/golang-migrate/$$d/*.sql \
	    $(DESTDIR)$(DATADIR)/dblock/migrations/golang-migrate/$$d/; \
	done
	install -d $(DESTDIR)$(DATADIR)/bash-completion/completions
	install -m 644 dist/bash-completion/dblock $(DESTDIR)$(DATADIR)/bash-completion/completions/dblock
	install -d $(DESTDIR)$(LIBDIR)/cmake/dblock
	for f in dblockConfig dblockConfigVersion; do \
	  sed -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCDIR@|$(INCDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    -e 's|@SOMAJOR@|$(SOMAJOR)|g' dist/cmake/$$f.cmake.in > $(DESTDIR)$(LIBDIR)/cmake/dblock/$$f.cmake; \
	  chmod 644 $(DESTDIR)$(LIBDIR)/cmake/dblock/$$f.cmake; \
	done
	install -d $(DESTDIR)$(DATADIR)/dblock/systemd
	sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@DATADIR@|$(DATADIR)|g' dist/systemd/dblock-reaper.service.in \
	  > $(DESTDIR)$(DATADIR)/dblock/systemd/dblock-reaper.service
	chmod 644 $(DESTDIR)$(DATADIR)/dblock/systemd/dblock-reaper.service
	install -m 644 dist/systemd/dblock-reaper.timer $(DESTDIR)$(DATADIR)/dblock/systemd/
	for m in man/*.1; do [ -e "$$m" ] && install -m 644 $$m $(DESTDIR)$(MANDIR)/man1/ || true; done
	for m in man/*.8; do [ -e "$$m" ] && install -m 644 $$m $(DESTDIR)$(MANDIR)/man8/ || true; done
	install -m 644 $(B)/man3/*.3 man/dblock.3 $(DESTDIR)$(MANDIR)/man3/
	@# (the package is told where this libdblock is: its loader looks there)
	if [ -n "$(PYTHONDIR)" ]; then \
	  install -d $(DESTDIR)$(PYTHONDIR)/dblock && \
	  install -m 644 python/dblock/*.py python/dblock/py.typed $(DESTDIR)$(PYTHONDIR)/dblock/ && \
	  sed -i 's|^INSTALL_LIBDIR = ""|INSTALL_LIBDIR = "$(LIBDIR)"|' $(DESTDIR)$(PYTHONDIR)/dblock/_native.py; \
	fi

uninstall:
	rm -f $(DESTDIR)$(INCDIR)/dblock.h $(DESTDIR)$(LIBDIR)/libdblock.a \
	  $(DESTDIR)$(LIBDIR)/libdblock.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	  $(DESTDIR)$(LIBDIR)/libdblock.so $(DESTDIR)$(LIBDIR)/pkgconfig/dblock.pc \
	  $(DESTDIR)$(BINDIR)/dblock $(DESTDIR)$(BINDIR)/dblock-bank $(DESTDIR)$(SBINDIR)/dblock-reaper \
	  $(DESTDIR)$(MANDIR)/man1/dblock.1 $(DESTDIR)$(MANDIR)/man1/dblock-bank.1 \
	  $(DESTDIR)$(MANDIR)/man8/dblock-reaper.8 \
	  $(DESTDIR)$(MANDIR)/man3/dblock.3 $(DESTDIR)$(MANDIR)/man3/dblock_*.3
	rm -rf $(DESTDIR)$(DATADIR)/dblock $(DESTDIR)$(LIBDIR)/cmake/dblock
	if [ -n "$(PYTHONDIR)" ]; then rm -rf $(DESTDIR)$(PYTHONDIR)/dblock; fi
	rm -f $(DESTDIR)$(DATADIR)/bash-completion/completions/dblock
	@# (and the directories install made, once empty: up to the first one that is not)
	-rmdir -p --ignore-fail-on-non-empty $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(LIBDIR)/cmake \
	  $(DESTDIR)$(INCDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(MANDIR)/man1 \
	  $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man8 \
	  $(DESTDIR)$(DATADIR)/bash-completion/completions $(if $(PYTHONDIR),$(DESTDIR)$(PYTHONDIR)) 2>/dev/null

clean:
	rm -rf build build-asan build-tsan
