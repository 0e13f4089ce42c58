/** The registry driver: references, auth, and the v2 client (manifests and blobs). */
export * from './reference.js';
export * from './auth.js';
export * from './client.js';
export * from './media.js';
