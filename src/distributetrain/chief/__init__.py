"""chief"""
