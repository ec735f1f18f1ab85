#!/usr/bin/env bash
# One Compactor serving many tenants, with NATS in operator mode (JWT accounts made with
# nsc): what tenants.conf is for a server configured with accounts, this script is for
# an operator who runs NATS with nsc (docs/tenants.md, "With nsc (JWT accounts)").
#
#   NSC_DIR=./nsc OUT=./nats-jwt deploy/nats/nsc-tenants.sh
#   nats-server -c ./nats-jwt/server.conf
#
# It creates, in a new nsc store (NSC_DIR, which must not exist yet):
#   - the operator (OPERATOR, default compactor) and its system account SYS;
#   - COMPACTOR, Compactor's account, with JetStream, its users admin, trigger, worker,
#     api and proxy (the permissions tenants.conf gives them) and six private service
#     exports;
#   - one account per tenant of TENANTS (default "acme globex"), without JetStream,
#     with its users <tenant>-producer and <tenant>-reader, and its imports of
#     COMPACTOR's exports, each with an activation token COMPACTOR signed for it; and
#     in COMPACTOR the tenant's own proxy user, <tenant>-proxy, whose rights name that
#     tenant's streams and subjects only;
#   - OUT/resolver.conf (the operator, SYS, and every account JWT preloaded in a memory
#     resolver), OUT/server.conf (which includes it and enables JetStream), and
#     OUT/creds/<user>.creds for every user.
#
# Not run in CI: nsc cannot be installed in Compactor's build environment. What it makes
# is built the same way, as JWTs, by internal/systemtest/tenant_jwt_test.go, which runs
# nats-server with it and checks this script's user permissions against tenants.conf's:
# change both together.
#
# Why not account_token_position, as in tenants.conf. With JWTs an account's name is its
# public key (56 upper-case characters), which is no valid tenant name (1 to 32 of a-z,
# 0-9 and '-'). So the exports are private, and for each tenant COMPACTOR signs
# activation tokens bound to the tenant account's public key that name the tenant's
# subjects: chat.acme.*.msg, compactor.acme.context, ... The tenant's name in Compactor's
# subjects is the one the operator wrote into the tokens. Rules for whoever signs them:
#   - one token per tenant and subject, with the tenant's own name at token 2: NEVER a
#     wildcard there (chat.*.*.msg, compactor.*.context). The server takes such a token
#     and then lets the account import any tenant's subjects with it, the test shows it;
#   - never the same tenant name in tokens for two accounts: both would be that tenant;
#   - the exports stay private (--private): a public export lets any account import any
#     tenant's subjects.
# A token bound to acme's key is useless to any other account: nsc refuses to add it
# (activation is not intended for this account), and an account JWT that holds it fails
# validation in nats-server, which then refuses the account's users.
#
# Adding a tenant later: TENANTS=initech NSC_DIR=<the same store> OUT=<the same dir>
# ADD_ONLY=1 deploy/nats/nsc-tenants.sh, then `nats-server --signal reload` once (the
# memory resolver's accounts are the configuration's; unlike tenants.conf, one reload
# serves the new account's imports), then the tenants file and
# `COMPACTOR_TENANT=initech compactor provision` as admin, as with tenants.conf.
# Nothing of COMPACTOR's JWT changes, and no other connection is touched.
# (nsc below: with --all-dirs NSC_DIR, as the script runs it.)
# Removing one: nsc delete account --name <tenant>, nsc generate config --mem-resolver
# --sys-account SYS --force --config-file OUT/resolver.conf, and reload: its
# connections are closed, its users refused. To cut a tenant off Compactor while its
# account stays, revoke its activations instead (for each of the six exports:
# nsc revocations add-activation --account COMPACTOR --service --subject <export>
# --target-account <its key>), generate and reload: what it sends to Compactor gets no
# responders.
# With the full NATS resolver instead of the memory one (resolver: {type: full}, nsc
# generate config --nats-resolver, nsc push -A), accounts change without a reload; the
# server refuses a pushed account JWT holding an activation made for another account,
# and takes one holding a wildcard activation, as the memory resolver does.
#
# Clients connect with their credentials file and their own inbox prefix:
#   COMPACTOR_NATS_CREDS=OUT/creds/api.creds COMPACTOR_NATS_INBOX_PREFIX=_INBOX_api \
#     COMPACTOR_ROLES=api compactor serve
set -euo pipefail

OPERATOR=${OPERATOR:-compactor}
NSC_DIR=${NSC_DIR:?set NSC_DIR to the directory of a new nsc store}
OUT=${OUT:?set OUT to the directory for server.conf, resolver.conf and creds/}
TENANTS=${TENANTS:-acme globex}
ADD_ONLY=${ADD_ONLY:-}

# The endpoints of the compactor service a tenant may call: compactor.<endpoint> in the
# tenant's account, compactor.<tenant>.<endpoint> in COMPACTOR. Not policy.
ENDPOINTS="context compact status recall forget"

nsc() { command nsc --all-dirs "$NSC_DIR" "$@"; }

# account_key prints the public key of account $1.
account_key() { nsc describe account --name "$1" --field sub | tr -d '"'; }

# The roles of COMPACTOR: the permissions of tenants.conf's users, as nsc flags.
add_compactor() {
	nsc add operator --name "$OPERATOR" --sys
	nsc add account --name COMPACTOR
	nsc edit account --name COMPACTOR \
		--js-mem-storage=-1 --js-disk-storage=-1 --js-streams=-1 --js-consumer=-1

	# Private: only an account holding an activation token may import, and only the
	# subjects the token names.
	# --response-threshold: an answer may come up to 5 minutes later (compactor.compact
	# waiting for its outcome); the default of 2 minutes would drop it.
	nsc add export --account COMPACTOR --service --private --name chat --subject 'chat.*.*.msg' --response-threshold 6m
	for ep in $ENDPOINTS; do
		nsc add export --account COMPACTOR --service --private --name "$ep" --subject "compactor.*.$ep" --response-threshold 6m
	done

	nsc add user --account COMPACTOR --name admin

	nsc add user --account COMPACTOR --name trigger \
		--allow-pub '$JS.API.STREAM.INFO.>' \
		--allow-pub '$JS.API.CONSUMER.INFO.>' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.*.*' \
		--allow-pub '$JS.ACK.*.*.>' \
		--allow-pub '$JS.API.CONSUMER.UNPIN.*.*' \
		--allow-pub '$JS.API.DIRECT.GET.*' \
		--allow-pub '$JS.API.DIRECT.GET.*.>' \
		--allow-pub '$JS.API.STREAM.MSG.GET.*' \
		--allow-pub '$KV.*.*.*' \
		--allow-pub 'compact.request.*.*' \
		--allow-pub 'compact.event.*.*' \
		--allow-pub 'activity.*.*' \
		--allow-pub '$JS.API.STREAM.PURGE.*' \
		--allow-pub '$JS.API.STREAM.MSG.DELETE.*' \
		--allow-pub '$KV.*.policy.trigger' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-workers' \
		--deny-pub '$JS.ACK.*.compactor-workers.>' \
		--allow-sub '_INBOX_trigger.>' \
		--allow-sub 'compact.event.*.*' \
		--allow-sub '$KV.*.*'

	nsc add user --account COMPACTOR --name worker \
		--allow-pub '$JS.API.STREAM.INFO.>' \
		--allow-pub '$JS.API.CONSUMER.INFO.>' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-workers' \
		--allow-pub '$JS.ACK.*.compactor-workers.>' \
		--allow-pub '$JS.API.DIRECT.GET.*' \
		--allow-pub '$JS.API.DIRECT.GET.*.>' \
		--allow-pub '$JS.API.STREAM.MSG.GET.*' \
		--allow-pub '$KV.*.*' \
		--allow-pub 'compact.event.*.*' \
		--allow-pub 'compact.dead.*.*' \
		--allow-pub 'compact.request.*.*' \
		--allow-pub '$JS.API.STREAM.PURGE.*' \
		--allow-pub '$JS.API.STREAM.MSG.DELETE.*' \
		--allow-pub '$KV.*.usage.tokens.*' \
		--allow-pub '$KV.*.policy.worker' \
		--allow-sub '_INBOX_worker.>' \
		--allow-sub '$KV.*.*'

	# --allow-pub-response: tenants.conf's allow_responses (one answer per request, on
	# the reply subject the import made), for up to 6 minutes (--response-ttl): an answer
	# of compactor.compact may come 5 minutes later.
	nsc add user --account COMPACTOR --name api \
		--allow-pub-response --response-ttl 6m \
		--allow-pub '$JS.API.STREAM.INFO.>' \
		--allow-pub '$JS.API.CONSUMER.INFO.>' \
		--allow-pub '$JS.API.DIRECT.GET.*' \
		--allow-pub '$JS.API.DIRECT.GET.*.>' \
		--allow-pub '$JS.API.STREAM.MSG.GET.*' \
		--allow-pub '$KV.*.*' \
		--allow-pub 'compact.request.*.*' \
		--allow-pub 'compact.event.*.*' \
		--allow-pub '$JS.API.CONSUMER.CREATE.*.>' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.*.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.*.*' \
		--allow-pub '$JS.API.STREAM.MSG.DELETE.*' \
		--allow-pub '$JS.API.STREAM.PURGE.*' \
		--allow-pub '$O.*.M.*' \
		--allow-pub '$KV.*.policy.api' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-workers' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-workers.>' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-trigger' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-trigger.>' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-idle' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-idle.>' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-workers' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-trigger' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-idle' \
		--deny-pub '$JS.API.CONSUMER.DELETE.*.compactor-workers' \
		--deny-pub '$JS.API.CONSUMER.DELETE.*.compactor-trigger' \
		--deny-pub '$JS.API.CONSUMER.DELETE.*.compactor-idle' \
		--allow-sub '_INBOX_api.>' \
		--allow-sub 'compactor.*.context' \
		--allow-sub 'compactor.*.compact' \
		--allow-sub 'compactor.*.status' \
		--allow-sub 'compactor.*.recall' \
		--allow-sub 'compactor.*.forget' \
		--allow-sub 'compactor.*.policy' \
		--allow-sub 'compactor.*' \
		--allow-sub '$SRV.>' \
		--allow-sub 'compact.event.*.*' \
		--allow-sub '$KV.*.*'

	nsc add user --account COMPACTOR --name proxy \
		--allow-pub '$JS.API.STREAM.INFO.>' \
		--allow-pub '$JS.API.CONSUMER.INFO.>' \
		--allow-pub 'chat.*.*.msg' \
		--allow-pub 'ledger.*.*' \
		--allow-pub '$JS.API.DIRECT.GET.*' \
		--allow-pub '$JS.API.DIRECT.GET.*.>' \
		--allow-pub '$JS.API.STREAM.MSG.GET.*' \
		--allow-pub '$O.*.C.>' \
		--allow-pub '$O.*.M.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.*.>' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.*.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.*.*' \
		--allow-pub 'compactor.*.compact' \
		--allow-pub '$KV.*.policy.proxy' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-workers' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-workers.>' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-trigger' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-trigger.>' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-idle' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-idle.>' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-workers' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-trigger' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-idle' \
		--deny-pub '$JS.API.CONSUMER.DELETE.*.compactor-workers' \
		--deny-pub '$JS.API.CONSUMER.DELETE.*.compactor-trigger' \
		--deny-pub '$JS.API.CONSUMER.DELETE.*.compactor-idle' \
		--allow-sub '_INBOX_proxy.>' \
		--allow-sub 'compact.event.*.*' \
		--allow-sub '$KV.*.*'
}

# import_activated has COMPACTOR sign an activation of its export $3 for tenant $1's
# account (key $2) naming $4, COMPACTOR's subject with the tenant's name, and imports it
# into the tenant's account as $5, the subject the tenant's services use.
import_activated() {
	local t=$1 key=$2 export=$3 subject=$4 local_subject=$5
	local token="$OUT/activations/$t-$export.jwt"
	nsc generate activation --account COMPACTOR --target-account "$key" \
		--subject "$subject" --output-file "$token"
	nsc add import --account "$t" --name "$export" --token "$token" --local-subject "$local_subject"
}

# add_tenant creates tenant $1's account, its imports and its users.
add_tenant() {
	local t=$1
	if ! [[ $t =~ ^[a-z0-9][a-z0-9-]{0,31}$ ]]; then
		echo "tenant name $t: want 1 to 32 of a-z, 0-9 and '-', not starting with '-'" >&2
		exit 2
	fi
	nsc add account --name "$t"
	local key
	key=$(account_key "$t")

	# The tenant's name at token 2, never a wildcard: see the header.
	import_activated "$t" "$key" chat "chat.${t}.*.msg" 'chat.*.msg'
	for ep in $ENDPOINTS; do
		import_activated "$t" "$key" "$ep" "compactor.${t}.$ep" "compactor.$ep"
	done

	nsc add user --account "$t" --name "${t}-producer" \
		--allow-pub 'chat.*.msg' \
		--allow-pub 'compactor.context' \
		--allow-pub 'compactor.compact' \
		--allow-pub 'compactor.status' \
		--allow-pub 'compactor.recall' \
		--allow-pub 'compactor.forget' \
		--allow-sub "_INBOX_${t}-producer.>"

	nsc add user --account "$t" --name "${t}-reader" \
		--allow-pub 'compactor.context' \
		--allow-pub 'compactor.status' \
		--allow-pub 'compactor.recall' \
		--allow-sub "_INBOX_${t}-reader.>"

	# The tenant's own proxy user, in COMPACTOR (compactor proxy with
	# COMPACTOR_TENANT=$t): the proxy user's rights on this tenant's streams, buckets and
	# subjects only, each stream named (a wildcard would match every tenant's).
	nsc add user --account COMPACTOR --name "${t}-proxy" \
		--allow-pub '$JS.API.STREAM.INFO.CHAT_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.COMPACT_REQUESTS_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.COMPACT_EVENTS_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.COMPACT_DEAD_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.ACTIVITY_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.KV_compaction_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.KV_compaction-policy_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.KV_compaction-forgotten_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.KV_compaction-triggers_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.KV_compaction-windows_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.KV_compaction-deployment_'"${t}" \
		--allow-pub '$JS.API.STREAM.INFO.OBJ_compaction-objects_'"${t}" \
		--allow-pub '$JS.API.CONSUMER.INFO.CHAT_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.COMPACT_REQUESTS_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.COMPACT_EVENTS_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.COMPACT_DEAD_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.ACTIVITY_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.KV_compaction_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.KV_compaction-policy_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.KV_compaction-forgotten_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.KV_compaction-triggers_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.KV_compaction-windows_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.KV_compaction-deployment_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.INFO.OBJ_compaction-objects_'"${t}"'.*' \
		--allow-pub "chat.${t}.*.msg" \
		--allow-pub "ledger.${t}.*" \
		--allow-pub '$JS.API.STREAM.INFO.LEDGER_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.CHAT_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.COMPACT_REQUESTS_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.COMPACT_EVENTS_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.COMPACT_DEAD_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.ACTIVITY_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-policy_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-forgotten_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-triggers_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-windows_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-deployment_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.OBJ_compaction-objects_'"${t}" \
		--allow-pub '$JS.API.DIRECT.GET.CHAT_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.COMPACT_REQUESTS_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.COMPACT_EVENTS_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.COMPACT_DEAD_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.ACTIVITY_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-policy_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-forgotten_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-triggers_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-windows_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.KV_compaction-deployment_'"${t}"'.>' \
		--allow-pub '$JS.API.DIRECT.GET.OBJ_compaction-objects_'"${t}"'.>' \
		--allow-pub '$JS.API.STREAM.MSG.GET.CHAT_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.COMPACT_REQUESTS_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.COMPACT_EVENTS_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.COMPACT_DEAD_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.ACTIVITY_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.KV_compaction_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.KV_compaction-policy_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.KV_compaction-forgotten_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.KV_compaction-triggers_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.KV_compaction-windows_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.KV_compaction-deployment_'"${t}" \
		--allow-pub '$JS.API.STREAM.MSG.GET.OBJ_compaction-objects_'"${t}" \
		--allow-pub '$O.compaction-objects_'"${t}"'.C.>' \
		--allow-pub '$O.compaction-objects_'"${t}"'.M.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.CHAT_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.COMPACT_REQUESTS_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.COMPACT_EVENTS_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.COMPACT_DEAD_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.ACTIVITY_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.KV_compaction_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.KV_compaction-policy_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.KV_compaction-forgotten_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.KV_compaction-triggers_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.KV_compaction-windows_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.KV_compaction-deployment_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.CREATE.OBJ_compaction-objects_'"${t}"'.>' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.CHAT_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.COMPACT_REQUESTS_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.COMPACT_EVENTS_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.COMPACT_DEAD_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.ACTIVITY_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_compaction_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_compaction-policy_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_compaction-forgotten_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_compaction-triggers_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_compaction-windows_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.KV_compaction-deployment_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.MSG.NEXT.OBJ_compaction-objects_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.CHAT_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.COMPACT_REQUESTS_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.COMPACT_EVENTS_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.COMPACT_DEAD_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.ACTIVITY_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.KV_compaction_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.KV_compaction-policy_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.KV_compaction-forgotten_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.KV_compaction-triggers_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.KV_compaction-windows_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.KV_compaction-deployment_'"${t}"'.*' \
		--allow-pub '$JS.API.CONSUMER.DELETE.OBJ_compaction-objects_'"${t}"'.*' \
		--allow-pub "compactor.${t}.compact" \
		--allow-pub '$KV.compaction-deployment_'"${t}"'.policy.proxy' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-workers' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-workers.>' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-trigger' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-trigger.>' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-idle' \
		--deny-pub '$JS.API.CONSUMER.CREATE.*.compactor-idle.>' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-workers' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-trigger' \
		--deny-pub '$JS.API.CONSUMER.MSG.NEXT.*.compactor-idle' \
		--deny-pub '$JS.API.CONSUMER.DELETE.*.compactor-workers' \
		--deny-pub '$JS.API.CONSUMER.DELETE.*.compactor-trigger' \
		--deny-pub '$JS.API.CONSUMER.DELETE.*.compactor-idle' \
		--allow-sub "_INBOX_${t}-proxy.>" \
		--allow-sub "compact.event.${t}.*" \
		--allow-sub '$KV.compaction-policy_'"${t}"'.*'
}

# write_config writes the memory resolver's configuration, the server's, and every
# user's credentials.
write_config() {
	mkdir -p "$OUT/creds"
	nsc generate config --mem-resolver --sys-account SYS --force --config-file "$OUT/resolver.conf"
	if [ ! -e "$OUT/server.conf" ]; then
		cat >"$OUT/server.conf" <<-'EOF'
			# The operator, SYS and the accounts' JWTs (nsc generate config --mem-resolver).
			include ./resolver.conf

			jetstream {
			  # store_dir: /var/lib/nats
			}
		EOF
	fi
	local user t
	for user in admin trigger worker api proxy; do
		nsc generate creds --account COMPACTOR --name "$user" --output-file "$OUT/creds/$user.creds"
	done
	for t in $TENANTS; do
		for user in "${t}-producer" "${t}-reader"; do
			nsc generate creds --account "$t" --name "$user" --output-file "$OUT/creds/$user.creds"
		done
		nsc generate creds --account COMPACTOR --name "${t}-proxy" --output-file "$OUT/creds/${t}-proxy.creds"
	done
}

main() {
	mkdir -p "$OUT/activations"
	if [ -z "$ADD_ONLY" ]; then
		if [ -e "$NSC_DIR" ]; then
			echo "$NSC_DIR exists: give NSC_DIR a new directory (or ADD_ONLY=1 to add tenants to it)" >&2
			exit 2
		fi
		add_compactor
	fi
	for t in $TENANTS; do
		add_tenant "$t"
	done
	write_config
}

main
