# Sourced by .ci/run: start_postgres starts a throwaway PostgreSQL cluster on
# 127.0.0.1, exports STREAMHOOKS_TEST_POSTGRES for pgstore's tests, and
# stops the cluster and removes its files when the shell exits.

# pg_bin prints the directory of initdb and pg_ctl, or nothing. Debian keeps
# them under /usr/lib/postgresql/<version>/bin, off the PATH.
pg_bin() {
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		dirname "$(command -v pg_ctl)"
		return
	fi
	local dir
	dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
	if [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
		echo "$dir"
	fi
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on, below
# the ephemeral range, where the local end of an outgoing connection could
# hold it without listening.
free_port() {
	local port low=32768
	if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
		read -r low _ </proc/sys/net/ipv4/ip_local_port_range
	fi
	if [ "$low" -le 11000 ]; then low=32768; fi
	while :; do
		port=$((10000 + RANDOM % (low - 10000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
}

start_postgres() {
	local sudo="" bin port version
	if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
	bin="$(pg_bin)"
	if [ -z "$bin" ]; then
		step "installing postgresql (initdb and pg_ctl are missing)"
		$sudo apt-get update
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
		bin="$(pg_bin)"
		if [ -z "$bin" ]; then
			echo "postgresql is installed but initdb and pg_ctl are not found" >&2
			return 1
		fi
	fi

	# initdb refuses to run as root: as root, run the cluster as the
	# postgres user that the Debian package creates.
	PG_AS=()
	if [ "$(id -u)" -eq 0 ]; then
		id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
		PG_AS=(runuser -u postgres --)
	fi

	PG_TMP="$(mktemp -d)"
	chmod 755 "$PG_TMP"
	mkdir "$PG_TMP/data" "$PG_TMP/run"
	if [ "$(id -u)" -eq 0 ]; then chown postgres "$PG_TMP/data" "$PG_TMP/run"; fi
	PG_BIN="$bin"
	trap stop_postgres EXIT

	version="$("$bin/pg_ctl" --version)"
	"${PG_AS[@]}" "$bin/initdb" -D "$PG_TMP/data" -U streamhooks --auth=trust --no-sync -E UTF8 >"$PG_TMP/initdb.log" ||
		{ cat "$PG_TMP/initdb.log" >&2; return 1; }
	# A port found free may be taken before the server binds it: try a
	# few. fsync off: the cluster is thrown away, and tests run faster.
	local attempt
	for attempt in 1 2 3 4 5; do
		port="$(free_port)"
		step "starting $version on 127.0.0.1:$port"
		if "${PG_AS[@]}" "$bin/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/run/postgres.log" -w \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $PG_TMP/run -c fsync=off -c max_connections=300" start >/dev/null; then
			break
		fi
		if [ "$attempt" -eq 5 ]; then
			cat "$PG_TMP/run/postgres.log" >&2
			return 1
		fi
	done
	export STREAMHOOKS_TEST_POSTGRES="postgres://streamhooks@127.0.0.1:$port/postgres?sslmode=disable"
}

stop_postgres() {
	if [ -n "${PG_BIN:-}" ]; then
		"${PG_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_TMP/data" -m immediate -w stop >/dev/null || true
	fi
	if [ -n "${PG_TMP:-}" ]; then rm -rf "$PG_TMP"; fi
}
