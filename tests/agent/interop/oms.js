#!/usr/bin/env node
// The other side of the OMS interop tests: sigstore-js (@sigstore/verify, @sigstore/sign, @sigstore/mock)
// and an OMS v1.0 serializer written here from the format's description, independently of the agent's
// C++ (it shares no code with it). Subcommands:
//
//   verify-key BUNDLE PUBLIC_KEY_PEM MODEL_DIR
//       @sigstore/verify checks the bundle's DSSE signature with the key (looked up by the bundle's
//       hint); then the payload must be exactly the OMS statement this file computes for MODEL_DIR
//       (same resources, in the same order, same subject digest).
//   sign-key MODEL_DIR PRIVATE_KEY_PEM OUT [--shard-size N] [--ignore PATH]... [--name NAME]
//       @sigstore/sign's DSSEBundleBuilder signs this file's OMS statement with the key: a v0.3 bundle
//       with a publicKey hint (SHA-256 of the PEM public key, as the model_signing tool writes it).
//   keyless MODEL_DIR OUT_DIR --identity EMAIL --issuer URL [--leaves N] [--index K] [--entry dsse|intoto]
//           [--shard-size N] [--ignore PATH]...
//       A keyless bundle against a test Sigstore: @sigstore/mock's Fulcio CA and CT log issue the
//       certificate (with an embedded SCT); the Rekor entry is built here as Rekor builds one (a dsse
//       0.0.1 body, the SET over its canonical form, an RFC 6962 inclusion proof in a tree of N leaves,
//       a signed checkpoint), or with --entry intoto comes from @sigstore/sign's RekorWitness against
//       @sigstore/mock's Rekor. Writes OUT_DIR/model.sig and OUT_DIR/trusted_root.json, and checks the
//       bundle with @sigstore/verify against that trusted root and identity before exiting 0.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const canonicalize = require('canonicalize');
const { bundleFromJSON, bundleToJSON } = require('@sigstore/bundle');
const { TrustedRoot } = require('@sigstore/protobuf-specs');
const sign = require('@sigstore/sign');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');

const PAYLOAD_TYPE = 'application/vnd.in-toto+json';
const PREDICATE_TYPE = 'https://model_signing/signature/v1.0';
const ISSUER_V1 = '1.3.6.1.4.1.57264.1.1';
const ISSUER_V2 = '1.3.6.1.4.1.57264.1.8';

function fail(msg) {
  console.error(`oms.js: ${msg}`);
  process.exit(1);
}

function option(args, name, fallback) {
  const i = args.indexOf(name);
  if (i < 0) return fallback;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
}

const sha256 = (data) => crypto.createHash('sha256').update(data).digest();

// --- OMS v1.0 serialization, from the format's description -------------------------------------

// Paths compared component by component (Python's PurePosixPath ordering), then shard offsets.
function compareResources(a, b) {
  const pa = a.path.split('/');
  const pb = b.path.split('/');
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    if (pa[i] !== pb[i]) return Buffer.compare(Buffer.from(pa[i]), Buffer.from(pb[i]));
  }
  if (pa.length !== pb.length) return pa.length - pb.length;
  return a.start - b.start;
}

function ignored(rel, ignorePaths) {
  const parts = rel.split('/');
  return ignorePaths.some((ig) => {
    const ip = ig.split('/').filter((c) => c !== '' && c !== '.');
    return ip.length <= parts.length && ip.every((c, i) => c === parts[i]);
  });
}

// Every regular file below dir except the ignored paths; symbolic links are refused (allow_symlinks false).
function walk(dir, ignorePaths, rel = '') {
  const out = [];
  for (const name of fs.readdirSync(path.join(dir, rel)).sort()) {
    const r = rel ? `${rel}/${name}` : name;
    if (ignored(r, ignorePaths)) continue;
    const st = fs.lstatSync(path.join(dir, r));
    if (st.isSymbolicLink()) fail(`${r} is a symbolic link`);
    if (st.isDirectory()) out.push(...walk(dir, ignorePaths, r));
    else if (st.isFile()) out.push({ path: r, size: st.size });
    else fail(`${r} is not a regular file`);
  }
  return out;
}

function resources(dir, serialization) {
  const files = walk(dir, serialization.ignore_paths || []);
  const out = [];
  for (const f of files) {
    const data = fs.readFileSync(path.join(dir, f.path));
    if (serialization.method === 'files') {
      out.push({ path: f.path, start: 0, name: f.path, algorithm: 'sha256', digest: sha256(data) });
      continue;
    }
    const n = serialization.shard_size;
    for (let start = 0; start < f.size; start += n) {
      const end = Math.min(f.size, start + n);
      out.push({
        path: f.path,
        start,
        name: `${f.path}:${start}:${end}`,
        algorithm: `sha256-sharded-${n}`,
        digest: sha256(data.subarray(start, end)),
      });
    }
  }
  return out.sort(compareResources);
}

function statement(dir, serialization, name) {
  const rs = resources(dir, serialization);
  return {
    _type: 'https://in-toto.io/Statement/v1',
    subject: [{ name, digest: { sha256: sha256(Buffer.concat(rs.map((r) => r.digest))).toString('hex') } }],
    predicateType: PREDICATE_TYPE,
    predicate: {
      serialization,
      resources: rs.map((r) => ({ name: r.name, algorithm: r.algorithm, digest: r.digest.toString('hex') })),
    },
  };
}

function pae(type, body) {
  return Buffer.concat([Buffer.from(`DSSEv1 ${type.length} ${type} ${body.length} `), body]);
}

// --- verify-key ----------------------------------------------------------------------------------

function verifyKey([bundlePath, keyPath, modelDir]) {
  const json = JSON.parse(fs.readFileSync(bundlePath, 'utf8'));
  const bundle = bundleFromJSON(json);
  const pem = fs.readFileSync(keyPath, 'utf8');
  const key = crypto.createPublicKey(pem);
  const hint = sha256(Buffer.from(key.export({ type: 'spki', format: 'pem' }))).toString('hex');
  const emptyRoot = TrustedRoot.fromJSON({ mediaType: 'application/vnd.dev.sigstore.trustedroot+json;version=0.1' });
  const finder = (h) => {
    if (h !== hint) throw new Error(`the bundle's key hint ${h} is not the key given (${hint})`);
    return { publicKey: key, validFor: () => true };
  };
  const verifier = new Verifier(toTrustMaterial(emptyRoot, finder), {
    tlogThreshold: 0,
    ctlogThreshold: 0,
    timestampThreshold: 0,
  });
  verifier.verify(toSignedEntity(bundle));
  if (bundle.content.dsseEnvelope.payloadType !== PAYLOAD_TYPE) fail('payloadType is not in-toto');
  const signed = JSON.parse(bundle.content.dsseEnvelope.payload.toString('utf8'));
  const expected = statement(modelDir, signed.predicate.serialization, signed.subject[0].name);
  if (signed.subject.length !== 1 || signed.subject[0].digest.sha256 !== expected.subject[0].digest.sha256) {
    fail(`subject ${JSON.stringify(signed.subject)}, expected ${JSON.stringify(expected.subject)}`);
  }
  if (signed.predicateType !== PREDICATE_TYPE) fail(`predicateType ${signed.predicateType}`);
  const got = signed.predicate.resources.map((r) => `${r.name} ${r.algorithm} ${r.digest}`);
  const want = expected.predicate.resources.map((r) => `${r.name} ${r.algorithm} ${r.digest}`);
  if (got.join('\n') !== want.join('\n')) {
    fail(`the resources differ from this implementation's serialization of the model:\n${got.join('\n')}\nexpected\n${want.join('\n')}`);
  }
  console.log(`verified: ${signed.predicate.resources.length} resources, subject ${signed.subject[0].digest.sha256}`);
}

// --- sign-key ------------------------------------------------------------------------------------

// The serialization a signer records: whole files or shards, model.sig and any --ignore paths left out.
function serializationFor(args) {
  const shard = option(args, '--shard-size', null);
  const ignore = ['model.sig'];
  for (let p = option(args, '--ignore', null); p; p = option(args, '--ignore', null)) ignore.push(p);
  return shard
    ? { method: 'shards', hash_type: 'sha256', shard_size: Number(shard), allow_symlinks: false, ignore_paths: ignore }
    : { method: 'files', hash_type: 'sha256', allow_symlinks: false, ignore_paths: ignore };
}

async function signKey(args) {
  const serialization = serializationFor(args);
  const name = option(args, '--name', null);
  const [modelDir, keyPath, out] = args;
  const priv = crypto.createPrivateKey(fs.readFileSync(keyPath));
  const pubPem = crypto.createPublicKey(priv).export({ type: 'spki', format: 'pem' });
  const st = statement(modelDir, serialization, name || path.basename(path.resolve(modelDir)));
  const curveHash = { 'prime256v1': 'sha256', 'secp384r1': 'sha384', 'secp521r1': 'sha512' };
  const details = priv.asymmetricKeyDetails || {};
  const algo = priv.asymmetricKeyType === 'ed25519' ? null : curveHash[details.namedCurve];
  const signer = {
    sign: async (data) => ({
      signature: crypto.sign(algo, data, priv),
      key: { $case: 'publicKey', publicKey: pubPem, hint: sha256(Buffer.from(pubPem)).toString('hex') },
    }),
  };
  const builder = new sign.DSSEBundleBuilder({ signer, witnesses: [] });
  const bundle = await builder.create({ data: Buffer.from(JSON.stringify(st)), type: PAYLOAD_TYPE });
  fs.writeFileSync(out, JSON.stringify(bundleToJSON(bundle), null, 2));
}

// --- keyless -------------------------------------------------------------------------------------

// RFC 6962 Merkle tree hash and audit path.
const leafHash = (d) => sha256(Buffer.concat([Buffer.from([0]), d]));
const nodeHash = (l, r) => sha256(Buffer.concat([Buffer.from([1]), l, r]));
function mth(leaves) {
  if (leaves.length === 1) return leaves[0];
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return nodeHash(mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}
function auditPath(m, leaves) {
  if (leaves.length === 1) return [];
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  if (m < k) return [...auditPath(m, leaves.slice(0, k)), mth(leaves.slice(k))];
  return [...auditPath(m - k, leaves.slice(k)), mth(leaves.slice(0, k))];
}

function keyPair() {
  return crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
}

// The log entry as Rekor writes one for a dsse 0.0.1 entry.
function rekorEntry(envelope, certPem, sig, tlog, leaves, index) {
  const envJSON = canonicalize({
    payload: envelope.payload,
    payloadType: envelope.payloadType,
    signatures: [{ sig: envelope.signatures[0].sig }],
  });
  const body = Buffer.from(
    canonicalize({
      apiVersion: '0.0.1',
      kind: 'dsse',
      spec: {
        envelopeHash: { algorithm: 'sha256', value: sha256(Buffer.from(envJSON)).toString('hex') },
        payloadHash: { algorithm: 'sha256', value: sha256(Buffer.from(envelope.payload, 'base64')).toString('hex') },
        signatures: [{ signature: sig.toString('base64'), verifier: Buffer.from(certPem).toString('base64') }],
      },
    })
  );
  const logID = sha256(tlog.publicKey.export({ type: 'spki', format: 'der' }));
  const integratedTime = Math.floor(Date.now() / 1000);
  const logIndex = 123456789 + index;
  const set = crypto.sign(
    'sha256',
    Buffer.from(canonicalize({ body: body.toString('base64'), integratedTime, logID: logID.toString('hex'), logIndex })),
    tlog.privateKey
  );
  const hashes = [];
  for (let i = 0; i < leaves; i++) hashes.push(i === index ? leafHash(body) : leafHash(crypto.randomBytes(40)));
  const root = mth(hashes);
  const origin = 'rekor.test.infergate - 1193050959916656506';
  const note = `${origin}\n${leaves}\n${root.toString('base64')}\n\n`;
  const noteSig = crypto.sign('sha256', Buffer.from(note.slice(0, -1)), tlog.privateKey);
  const checkpoint = `${note}\u2014 rekor.test.infergate ${Buffer.concat([logID.subarray(0, 4), noteSig]).toString('base64')}\n`;
  return {
    logIndex: String(logIndex),
    logId: { keyId: logID.toString('base64') },
    kindVersion: { kind: 'dsse', version: '0.0.1' },
    integratedTime: String(integratedTime),
    inclusionPromise: { signedEntryTimestamp: set.toString('base64') },
    inclusionProof: {
      logIndex: String(index),
      rootHash: root.toString('base64'),
      treeSize: String(leaves),
      hashes: auditPath(index, hashes).map((h) => h.toString('base64')),
      checkpoint: { envelope: checkpoint },
    },
    canonicalizedBody: body.toString('base64'),
  };
}

function trustedRoot(caRoot, tlogKey, ctlog, start) {
  const log = (der, id) => ({
    baseUrl: 'https://rekor.test.infergate',
    hashAlgorithm: 'SHA2_256',
    publicKey: { rawBytes: der.toString('base64'), keyDetails: 'PKIX_ECDSA_P256_SHA_256', validFor: { start } },
    logId: { keyId: id.toString('base64') },
  });
  const tlogDer = tlogKey.export({ type: 'spki', format: 'der' });
  return {
    mediaType: 'application/vnd.dev.sigstore.trustedroot+json;version=0.1',
    tlogs: [log(tlogDer, sha256(tlogDer))],
    certificateAuthorities: [
      {
        subject: { organization: 'sigstore.mock', commonName: 'sigstore' },
        uri: 'https://fulcio.test.infergate',
        certChain: { certificates: [{ rawBytes: Buffer.from(caRoot).toString('base64') }] },
        validFor: { start },
      },
    ],
    ctlogs: [{ ...log(ctlog.publicKey, Buffer.from(ctlog.logID)), baseUrl: 'https://ctfe.test.infergate' }],
    timestampAuthorities: [],
  };
}

async function keyless(args) {
  const identity = option(args, '--identity', null);
  const issuer = option(args, '--issuer', null);
  const leaves = Number(option(args, '--leaves', '1'));
  const index = Number(option(args, '--index', '0'));
  const entry = option(args, '--entry', 'dsse');
  const serialization = serializationFor(args);
  const [modelDir, outDir] = args;
  if (!identity || !issuer || !modelDir || !outDir) fail('keyless MODEL_DIR OUT_DIR --identity EMAIL --issuer URL');
  const mock = require('@sigstore/mock');
  const start = new Date(Date.now() - 3600 * 1000).toISOString();
  const ctlog = await mock.initializeCTLog(keyPair());
  const ca = await mock.initializeCA(keyPair(), ctlog);
  const tlogKeys = keyPair();
  const payload = Buffer.from(JSON.stringify(statement(modelDir, serialization, path.basename(path.resolve(modelDir)))));
  let bundleJSON;
  if (entry === 'intoto') {
    // Everything by sigstore-js: FulcioSigner and RekorWitness against the mock services (in-process).
    const { mock: serve } = require('@sigstore/mock/dist/mock');
    const tlog = await mock.initializeTLog('https://rekor.test.infergate', tlogKeys);
    serve('https://fulcio.test.infergate', mock.fulcioHandler(ca));
    serve('https://rekor.test.infergate', mock.rekorHandler(tlog));
    const enc = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const token = `${enc({ alg: 'none' })}.${enc({ iss: issuer, sub: identity, email: identity, email_verified: true })}.`;
    const signer = new sign.FulcioSigner({
      fulcioBaseURL: 'https://fulcio.test.infergate',
      identityProvider: { getToken: async () => token },
    });
    const witness = new sign.RekorWitness({ rekorBaseURL: 'https://rekor.test.infergate', entryType: 'intoto' });
    const bundle = await new sign.DSSEBundleBuilder({ signer, witnesses: [witness] }).create({ data: payload, type: PAYLOAD_TYPE });
    bundleJSON = bundleToJSON(bundle);
  } else {
    const leaf = keyPair();
    const der = await ca.issueCertificate({
      publicKey: leaf.publicKey.export({ type: 'spki', format: 'der' }),
      subjectAltName: identity,
      extensions: [
        { oid: ISSUER_V1, value: issuer, legacy: true },
        { oid: ISSUER_V2, value: issuer },
      ],
    });
    const certPem = new crypto.X509Certificate(Buffer.from(der)).toString();
    const sig = crypto.sign('sha256', pae(PAYLOAD_TYPE, payload), leaf.privateKey);
    const envelope = { payload: payload.toString('base64'), payloadType: PAYLOAD_TYPE, signatures: [{ sig: sig.toString('base64') }] };
    bundleJSON = {
      mediaType: 'application/vnd.dev.sigstore.bundle.v0.3+json',
      verificationMaterial: {
        certificate: { rawBytes: Buffer.from(der).toString('base64') },
        tlogEntries: [rekorEntry(envelope, certPem, sig, tlogKeys, leaves, index)],
        timestampVerificationData: {},
      },
      dsseEnvelope: envelope,
    };
  }
  const root = trustedRoot(ca.rootCertificate, tlogKeys.publicKey, ctlog, start);
  // The independent verifier must accept what we hand to ours.
  const verifier = new Verifier(toTrustMaterial(TrustedRoot.fromJSON(root)));
  verifier.verify(toSignedEntity(bundleFromJSON(bundleJSON)), {
    subjectAlternativeName: identity,
    extensions: { issuer },
  });
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, 'model.sig'), JSON.stringify(bundleJSON, null, 2));
  fs.writeFileSync(path.join(outDir, 'trusted_root.json'), JSON.stringify(root, null, 2));
  console.log(`keyless bundle verified by @sigstore/verify (${entry} entry, ${leaves} leaves)`);
}

const [cmd, ...rest] = process.argv.slice(2);
const commands = { 'verify-key': verifyKey, 'sign-key': signKey, keyless };
if (!commands[cmd]) fail('usage: oms.js verify-key|sign-key|keyless ...');
Promise.resolve(commands[cmd](rest)).catch((e) => fail(e && e.stack ? e.stack : String(e)));
